"""pi-dispatch operator: resumable pi jobs on Kubernetes."""

__version__ = "0.2.0"
