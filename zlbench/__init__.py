"""zlbench: run an operator benchmark corpus across accelerators; tables you can trust."""

__version__ = "0.1.0"
