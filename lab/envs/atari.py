"""Real Atari 2600 games through ale-py (its wheel bundles the ROMs), stepped on the host,
for the host executions of GA3C and A3C (``lab.train.ga3c``, the ``gpu_atari`` preset of
notebook 06).

The standard preprocessing of DQN, A3C and GA3C (Mnih et al. 2015, 2016), done by
Gymnasium's ``AtariPreprocessing`` and ``FrameStackObservation`` (opencv resizes):

- frame skip 4: each action is repeated for 4 frames and the maximum of the last two frames
  is kept (some sprites are drawn on alternate frames);
- grey frames resized to 84x84, scaled to [0, 1], the last 4 stacked channels-last:
  observations of shape ``(84, 84, 4)``;
- up to 30 no-op actions at the start of every episode (random starts);
- the game's minimal action set (Pong 6, Breakout 4); sticky actions optional
  (``sticky``, ALE v5's default is 0.25; the papers used none, so 0 here);
- ALE v5's limit of 108,000 frames (27,000 agent steps) ends an episode as a truncation.

``HostAtari`` has ``HostMinAtar``'s interface (``reset``, ``step`` with auto-reset, a
``MinAtarStep`` per step), so an agent thread steps either. ``AtariGame`` names a game and
gives the shapes the network and the compiled functions need. ale-py, Gymnasium and opencv
come with the ``atari`` extra and are imported only when a game is made.
"""

import dataclasses
import functools

import numpy as np

from lab.envs.minatar import MinAtarStep

FRAME_SKIP, SCREEN, STACK, NOOP_MAX = 4, 84, 4, 30
EXTRA = "pip install -e '.[atari]'"


def _ale():
    try:
        import ale_py
        import gymnasium
    except ImportError as err:
        raise ImportError(f"Atari games need ale-py and Gymnasium: {EXTRA}") from err
    gymnasium.register_envs(ale_py)
    return ale_py, gymnasium


@functools.cache
def games() -> tuple[str, ...]:
    """The ROMs bundled in the installed ale-py wheel, by ALE's ids (``"pong"``, ...)."""
    ale_py, _ = _ale()
    return tuple(ale_py.roms.get_all_rom_ids())


def _env_id(game: str) -> str:
    """ALE's Gymnasium id of ``game``: ``"space_invaders"`` -> ``"ALE/SpaceInvaders-v5"``."""
    return "ALE/" + "".join(part.capitalize() for part in game.split("_")) + "-v5"


@functools.cache
def _num_actions(game: str) -> int:
    _, gymnasium = _ale()
    env = gymnasium.make(_env_id(game), full_action_space=False)
    n = int(env.action_space.n)
    env.close()
    return n


@dataclasses.dataclass(frozen=True)
class AtariGame:
    """One Atari game, by ALE's id; checks the settings when made."""

    game: str = "pong"
    sticky: float = 0.0

    def __post_init__(self):
        if self.game not in games():
            raise ValueError(f"unknown Atari game {self.game!r}; ale-py bundles "
                             f"{', '.join(games()[:8])}, ... ({len(games())} in all)")
        if not 0.0 <= self.sticky < 1.0:
            raise ValueError(f"sticky must be in [0, 1), got {self.sticky}")

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return (SCREEN, SCREEN, STACK)

    @property
    def num_actions(self) -> int:
        return _num_actions(self.game)


class HostAtari:
    """One Atari game with the standard preprocessing, auto-resetting like ``HostMinAtar``:
    ``reset() -> obs``; ``step(action) -> (obs, MinAtarStep)``, ``action`` an index into the
    minimal action set."""

    def __init__(self, game: str = "pong", sticky: float = 0.0, max_steps: int = 0,
                 seed: int = 0):
        AtariGame(game, sticky)  # checks the settings
        _, gymnasium = _ale()
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TimeLimit

        env = gymnasium.make(_env_id(game), frameskip=1, repeat_action_probability=sticky,
                             full_action_space=False)
        env = AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP,
                                 screen_size=SCREEN, grayscale_obs=True, scale_obs=True)
        if max_steps > 0:  # agent steps (outside the frame skip and the no-op starts)
            env = TimeLimit(env, max_steps)
        self.env = FrameStackObservation(env, STACK)
        self.seed, self.episodes = seed, 0

    def reset(self) -> np.ndarray:
        # each episode its own seed: the no-op starts differ, runs repeat
        obs, _ = self.env.reset(seed=self.seed * 1_000_003 + self.episodes)
        self.episodes += 1
        return self._frames(obs)

    @staticmethod
    def _frames(obs) -> np.ndarray:
        return np.moveaxis(np.asarray(obs, np.float32), 0, -1)  # (4, 84, 84) -> (84, 84, 4)

    def step(self, action: int) -> tuple[np.ndarray, MinAtarStep]:
        obs, reward, terminated, truncated, _ = self.env.step(int(action))
        obs = self._frames(obs)
        truncated = bool(truncated) and not terminated
        step = MinAtarStep(np.float32(reward), bool(terminated), truncated, obs, int(action))
        if terminated or truncated:
            obs = self.reset()
        return obs, step

    def close(self) -> None:
        self.env.close()
