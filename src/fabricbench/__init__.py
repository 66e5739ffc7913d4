"""fabricbench: what an HPC or AI cluster's interconnect really delivers."""

__version__ = "0.1.0"
