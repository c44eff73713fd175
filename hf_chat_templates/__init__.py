"""Chat templates for Hugging Face tokenizers that train and serve the way the model expects.

>>> import hf_chat_templates as hct
>>> [f.name for f in hct.list_families()]
['gemma3-tools', 'gigachat3', 'gpt-oss', 'llama3.2-pythonic']

Importing this package is light: transformers is imported only by the functions that need it.
"""

from __future__ import annotations

from .base_tokenizers import BASE_TOKENIZERS, base_tokenizer
from .errors import HfChatTemplatesError
from .folder import TokenizerFolder, read_folder
from .install import FileChange, InstallPlan, InstallResult, apply_install, install, plan_install
from .registry import Family, TemplateKwarg, Variant, get_family, list_families
from .vocab import TokenChange

__version__ = "0.1.0"

__all__ = [
    "BASE_TOKENIZERS",
    "Family",
    "FileChange",
    "HfChatTemplatesError",
    "InstallPlan",
    "InstallResult",
    "TemplateKwarg",
    "TokenChange",
    "TokenizerFolder",
    "Variant",
    "apply_install",
    "base_tokenizer",
    "get_family",
    "install",
    "list_families",
    "plan_install",
    "read_folder",
]
