"""Chat templates for Hugging Face tokenizers that train and serve the way the model expects.

>>> import hf_chat_templates as hct
>>> [f.name for f in hct.list_families()]
['gemma3-tools', 'gigachat3', 'gpt-oss', 'llama3.2-pythonic']

The pipeline, one folder a stage: `families` (the registry) -> `installation` -> `verification` -> `training`
-> `view` -> `publish`, on foundations that import no stage: `template`, `tokenizer`, `conversations`, `errors`,
`outputs` (the one writer), `_compat` (every private access to another package) and `_version`. `cli` is the
command line. Importing this package is light: transformers is imported only by the functions that need it.
"""

from __future__ import annotations

from . import _compat, _version
from .errors import HfChatTemplatesError
from .families.registry import Family, Variant, get_family, list_families
from .families.source import TemplateChoice
from .installation.apply import apply_install, install
from .installation.plan import InstallPlan, InstallResult
from .installation.planner import plan_install
from .publish.hub import PushPlan, PushResult, plan_push, push
from .template.training_variant import derive_training_template
from .tokenizer.base import base_tokenizer
from .tokenizer.folder import read_folder
from .training.dataset import prepare
from .training.features import TrainingFeatures
from .verification.results import CheckResult, VerificationReport
from .verification.runner import verify, verify_all

__version__ = _version.package_version()
_compat.quiet_no_torch_notice()  # transformers' notice when torch is absent or hidden

__all__ = [
    "CheckResult",
    "Family",
    "HfChatTemplatesError",
    "InstallPlan",
    "InstallResult",
    "PushPlan",
    "PushResult",
    "TemplateChoice",
    "TrainingFeatures",
    "Variant",
    "VerificationReport",
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
