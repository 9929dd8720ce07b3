"""The peer comparison: one module per queue with the same interface
(``base.Peer``), the workloads that drive them (``harness``), the servers and the peers'
venv (``env``), and the plots (``plots``).  ``python -m bench.compare`` runs it all.

Nothing here imports a peer library at package import: the peers' modules run in
``bench/.peers-venv``, ours in the project's venv.
"""
