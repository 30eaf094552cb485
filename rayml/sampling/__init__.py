"""Samplers: Langevin-type MCMC and parallel-in-time simulation of sampling dynamics."""
