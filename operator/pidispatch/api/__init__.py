"""Typed views of the custom resources, and the CRD manifests generated from one source."""
