"""The public surface is small and explicit; a change to it is deliberate."""

from __future__ import annotations

import hf_chat_templates

EXPECTED = {
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
}


def test_all_is_pinned() -> None:
    assert set(hf_chat_templates.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(hf_chat_templates, name) is not None


def test_errors_keep_builtin_meaning() -> None:
    from hf_chat_templates import errors

    assert issubclass(errors.UnknownNameError, LookupError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.TokenizerFolderError, OSError)
    assert issubclass(errors.OutputExistsError, FileExistsError)
    assert issubclass(errors.MissingDependencyError, ImportError)
    err = errors.TokenizerFolderError("x: broken", hint="do y")
    assert str(err) == "x: broken" and err.hint == "do y"
