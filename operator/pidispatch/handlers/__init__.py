"""Thin kopf registrations and the shell that acts on the cluster; decisions live in ``flow``."""
