"""One boolean parser for our environment variables; preset files follow llama.cpp's words."""

from __future__ import annotations

import pytest

from service.core.booleans import parse_bool
from service.llamacpp.options import model_settings
from service.llamacpp.presets import parse_preset
from service.settings import Settings


@pytest.mark.parametrize("text", ["1", "true", "TRUE", " yes ", "On"])
def test_true_words(text: str) -> None:
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "false", "No", "off "])
def test_false_words(text: str) -> None:
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["", "maybe", "2", "tru"])
def test_anything_else_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="expected true or false"):
        parse_bool(text)


def test_empty_means_the_default_only_when_asked() -> None:
    assert parse_bool("", empty=False) is False and parse_bool(" ", empty=True) is True


def test_settings_use_it() -> None:
    env = {"MODELROUTER_AUTOLOAD": "off", "MODELROUTER_RESUME_DOWNLOADS_ON_START": "yes"}
    settings = Settings.from_env(env)
    assert settings.autoload is False and settings.resume_downloads_on_start is True
    with pytest.raises(ValueError, match="expected true or false"):
        Settings.from_env({"MODELROUTER_AUTOLOAD": "sometimes"})


@pytest.mark.parametrize(
    ("text", "expected"), [("on", True), ("enabled", True), ("1", True), ("off", False), ("0", False)]
)
def test_preset_flags_follow_llama_cpp(text: str, expected: bool) -> None:
    [section] = parse_preset(f"[m]\nload-on-startup = {text}\n", "test.ini").sections
    assert model_settings(section.options, section.extras).config.load_on_startup is expected
