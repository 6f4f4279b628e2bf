"""pi-dispatch operator: resumable pi jobs on Kubernetes."""

__version__ = "0.1.0"
