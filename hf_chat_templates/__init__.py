"""Chat templates for Hugging Face tokenizers that train and serve the way the model expects.

>>> import hf_chat_templates as hct
>>> [f.name for f in hct.list_families()]
['gemma3-tools', 'gigachat3', 'gpt-oss', 'llama3.2-pythonic']

The pipeline: a registry of template families -> install -> verify -> push; for training, install --training
and prepare. Importing this package is light:
transformers is imported only by the functions that need it.
"""

from __future__ import annotations

from .base_tokenizers import base_tokenizer
from .errors import HfChatTemplatesError
from .folder import read_folder
from .install import InstallPlan, InstallResult, apply_install, install, plan_install
from .prepare import TrainingFeatures, prepare
from .push import PushPlan, PushResult, plan_push, push
from .registry import Family, Variant, get_family, list_families
from .training import derive_training_template
from .verify import CheckResult, VerificationReport, verify, verify_all

__version__ = "0.1.0"

__all__ = [
    "CheckResult",
    "Family",
    "HfChatTemplatesError",
    "InstallPlan",
    "InstallResult",
    "PushPlan",
    "PushResult",
    "TrainingFeatures",
    "VerificationReport",
    "Variant",
    "apply_install",
    "base_tokenizer",
    "derive_training_template",
    "get_family",
    "install",
    "list_families",
    "plan_install",
    "plan_push",
    "prepare",
    "push",
    "read_folder",
    "verify",
    "verify_all",
]
