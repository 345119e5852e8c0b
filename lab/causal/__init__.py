"""Causal graphs, structural causal models, the Gaussian BIC with a structure search under
background knowledge, and causal model selection (Kyono & van der Schaar 2019)."""

from lab.causal.scm import SCM, Graph, check_dag, random_dag, topological_order
from lab.causal.score import Knowledge, StandIn, graph_bic, node_bic, search, target_terms
from lab.causal.select import ancestor_lambda, causal_scores, combined, minmax, top_k

__all__ = ["SCM", "Graph", "Knowledge", "StandIn", "ancestor_lambda", "causal_scores",
           "check_dag", "combined", "graph_bic", "minmax", "node_bic", "random_dag", "search",
           "target_terms", "top_k", "topological_order"]
