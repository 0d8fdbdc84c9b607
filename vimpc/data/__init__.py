"""Data layer: initial-condition sampling, excitation inputs, rollouts and datasets."""

from vimpc.data.dataset import Dataset as Dataset
from vimpc.data.excitation import EXCITATION_KINDS as EXCITATION_KINDS
from vimpc.data.excitation import chirp as chirp
from vimpc.data.excitation import make_excitation as make_excitation
from vimpc.data.excitation import random_steps as random_steps
from vimpc.data.excitation import zero as zero
from vimpc.data.rollout import add_noise as add_noise
from vimpc.data.rollout import rollout_env as rollout_env
from vimpc.data.rollout import rollout_model as rollout_model
from vimpc.data.sampling import halton as halton
from vimpc.data.sampling import onto_constraints as onto_constraints
from vimpc.data.sampling import project_onto_constraints as project_onto_constraints
from vimpc.data.sampling import project_velocity as project_velocity
from vimpc.data.sampling import uniform as uniform

__all__ = [
    "EXCITATION_KINDS",
    "Dataset",
    "add_noise",
    "chirp",
    "halton",
    "make_excitation",
    "onto_constraints",
    "project_onto_constraints",
    "project_velocity",
    "random_steps",
    "rollout_env",
    "rollout_model",
    "uniform",
    "zero",
]
