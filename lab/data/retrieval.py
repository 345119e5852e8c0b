"""Key-value retrieval: a task whose answer sits far from the question.

Each sequence of ``length`` tokens holds ``keys`` records, one per key in a random order,
each a single token that stands for the pair (key, value) with a random value out of
``values``; the records sit at random positions in the first half of the sequence, every
other position is a filler token. The last ``queries`` tokens each ask for a random key; the
target at such a position is that key's value (every other position has target -1: no
loss). Chance accuracy is ``1 / values``.

Cut into an even number N of contiguous chunks, the records (first half) and the questions
(second half) are never on the same device, so a model that attends only within its chunk
cannot do better than chance: the answer needs tokens that other devices hold (notebook 09's
ablation).

Token ids: records ``key * values + value``; questions ``keys * values + key``; fillers
after those.
"""

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Retrieval:
    """The task's sizes."""

    length: int = 256  # tokens per sequence, the questions last
    keys: int = 4  # records per sequence (every key once)
    values: int = 8  # possible values: the classes, chance 1 / values
    fillers: int = 16  # distinct filler tokens
    queries: int = 16  # questions at the end of each sequence

    def __post_init__(self):
        if min(self.keys, self.values, self.fillers) < 1:
            raise ValueError(f"keys ({self.keys}), values ({self.values}) and fillers "
                             f"({self.fillers}) must each be at least 1")
        half = self.length // 2
        if self.keys > half or not 1 <= self.queries <= half:
            raise ValueError(f"{self.keys} records and {self.queries} questions must each fit "
                             f"in half of a sequence of {self.length}; use fewer or a longer "
                             "sequence")

    @property
    def vocab(self) -> int:
        return self.keys * self.values + self.keys + self.fillers

    @property
    def chance(self) -> float:
        return 1 / self.values


def sample(task: Retrieval, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One sequence: ``(tokens (L,), targets (L,))``, targets -1 except at the questions."""
    k_place, k_values, k_fill, k_ask = jax.random.split(key, 4)
    where = jax.random.permutation(k_place, task.length // 2)[: task.keys]
    values = jax.random.randint(k_values, (task.keys,), 0, task.values)
    records = jnp.arange(task.keys) * task.values + values
    first_filler = task.keys * task.values + task.keys
    tokens = jax.random.randint(k_fill, (task.length,), first_filler, task.vocab)
    tokens = tokens.at[where].set(records)
    asked = jax.random.randint(k_ask, (task.queries,), 0, task.keys)
    tokens = tokens.at[-task.queries:].set(task.keys * task.values + asked)
    targets = jnp.full((task.length,), -1).at[-task.queries:].set(values[asked])
    return tokens.astype(jnp.int32), targets.astype(jnp.int32)


def batch(task: Retrieval, key: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
    """``size`` sequences: ``(tokens (B, L), targets (B, L))``."""
    return jax.vmap(lambda k: sample(task, k))(jax.random.split(key, size))
