"""The ONNX frontend: an ONNX file read into the shared integer ops. importer.py (ONNX -> Relax with
qsynth's converter map, QOperator ops as QDQ; lowbit.py turns every low-bit form into QCDQ first,
qdq_propagation.py and ort_fusion.py move and fuse Q/DQ as onnxruntime does), then rewrite.py (QDQ
groups -> integer ops; qdq.py reads the graph, batch_norm.py and channels.py the ops between
convolutions)."""
