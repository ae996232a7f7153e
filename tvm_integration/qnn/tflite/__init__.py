"""The TFLite frontend: a .tflite file read into the shared integer ops (importer.py; ops.py, one
reader per TFLite operator kind)."""
