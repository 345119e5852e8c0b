"""Causal graphs, structural causal models, the Gaussian BIC with structure searches under
background knowledge (greedy over DAGs, and GES over equivalence classes), and causal model
selection (Kyono & van der Schaar 2019)."""

# Eager, not lab.lazy: the function ``ges`` shares its module's name, which a lazy package
# would hand out once anything imported ``lab.causal.ges`` (numpy and scipy only: 0.2 s).
from lab.causal.ges import GESResult, ges
from lab.causal.pdag import cpdag
from lab.causal.scm import SCM, Graph, check_dag, random_dag, topological_order
from lab.causal.score import Knowledge, StandIn, graph_bic, node_bic, search, target_terms
from lab.causal.select import ancestor_lambda, causal_scores, combined, minmax, top_k

__all__ = ["SCM", "GESResult", "Graph", "Knowledge", "StandIn", "ancestor_lambda",
           "causal_scores", "check_dag", "combined", "cpdag", "ges", "graph_bic", "minmax",
           "node_bic", "random_dag", "search", "target_terms", "top_k", "topological_order"]
