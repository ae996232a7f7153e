"""The ``qsynth`` sub-commands, one module each; ``synth/cli.py`` says how they are registered."""
