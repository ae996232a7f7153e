"""The ``qsynth`` sub-commands, one module each; ``qsynth/cli.py`` says how they are registered."""
