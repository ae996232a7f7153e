"""The application: the ``qsynth`` command line (cli.py; one module per command in commands/) and what
only the commands use: the synthesis sweep and its Ray executor, the host report, the benchmark report
and its figures, the progress display. It comes last in the order of dependence (isa_specs <- sketches
<- synth <- emit <- tvm_integration <- qsynth): it may import every library package, and no library
package imports it. Importing it imports nothing, so ``python -m qsynth.cluster`` on a Ray worker and
``qsynth --help`` stay light."""
