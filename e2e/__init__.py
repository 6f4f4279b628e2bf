"""End-to-end tier: a real kube-apiserver + etcd + kube-controller-manager built from Go modules,
a test kubelet that runs Pods as local processes, and pytest fixtures (see conftest.py)."""
