"""PDE solvers: the Kronecker-structured kernel solver for nonlinear PDEs and its baselines."""
