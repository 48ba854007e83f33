"""Shared code of the attention course: the single source of truth the notebooks import.

Importing this package has no side effects and does not import matplotlib or
ipywidgets; ``helpers.plotting``, ``helpers.widgets`` and ``helpers.exercises``
are imported explicitly by the notebooks that draw or quiz.
"""

from .attention import *  # noqa: F401,F403
from .attention import __all__ as _attention_all
from .attention_sinks import *  # noqa: F401,F403
from .attention_sinks import __all__ as _attention_sinks_all
from .data import *  # noqa: F401,F403
from .data import __all__ as _data_all
from .device import *  # noqa: F401,F403
from .device import __all__ as _device_all
from .cross_attention import *  # noqa: F401,F403
from .cross_attention import __all__ as _cross_attention_all
from .dropout import *  # noqa: F401,F403
from .dropout import __all__ as _dropout_all
from .efficient import *  # noqa: F401,F403
from .efficient import __all__ as _efficient_all
from .generation import *  # noqa: F401,F403
from .generation import __all__ as _generation_all
from .heads import *  # noqa: F401,F403
from .heads import __all__ as _heads_all
from .induction import *  # noqa: F401,F403
from .induction import __all__ as _induction_all
from .latent_attention import *  # noqa: F401,F403
from .latent_attention import __all__ as _latent_attention_all
from .masks import *  # noqa: F401,F403
from .masks import __all__ as _masks_all
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .number_words import *  # noqa: F401,F403
from .number_words import __all__ as _number_words_all
from .positions import *  # noqa: F401,F403
from .positions import __all__ as _positions_all
from .position_model import *  # noqa: F401,F403
from .position_model import __all__ as _position_model_all
from .recurrent import *  # noqa: F401,F403
from .recurrent import __all__ as _recurrent_all
from .source import *  # noqa: F401,F403
from .source import __all__ as _source_all
from .tasks import *  # noqa: F401,F403
from .tasks import __all__ as _tasks_all
from .training import *  # noqa: F401,F403
from .training import __all__ as _training_all
# toy_model's generic `accuracy` stays in its module (helpers.toy_model.accuracy).
from .toy_model import AttentionOnlyModel, BidirectionalAttention, FetchTask, ToyTrainingRun, train_toy_model

_toy_model_all = ["AttentionOnlyModel", "BidirectionalAttention", "FetchTask", "ToyTrainingRun", "train_toy_model"]

__all__ = [*_attention_all, *_attention_sinks_all, *_cross_attention_all, *_data_all, *_device_all, *_dropout_all,
           *_efficient_all, *_generation_all, *_heads_all, *_induction_all, *_latent_attention_all, *_masks_all,
           *_modules_all, *_number_words_all, *_position_model_all, *_positions_all, *_recurrent_all, *_source_all,
           *_tasks_all, *_training_all, *_toy_model_all]
