"""One boolean parser for environment variables and preset files."""

from __future__ import annotations

import pytest

from service.core.flags import parse_bool
from service.presets import PresetError, parse_presets
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


def test_settings_and_presets_share_it(tmp_path: object) -> None:
    env = {"MODELROUTER_AUTOLOAD": "off", "MODELROUTER_RESUME_DOWNLOADS_ON_START": "yes"}
    settings = Settings.from_env(env)
    assert settings.autoload is False and settings.resume_downloads_on_start is True
    with pytest.raises(ValueError, match="expected true or false"):
        Settings.from_env({"MODELROUTER_AUTOLOAD": "sometimes"})
    (config, _path) = parse_presets("[m]\nload-on-startup = on\n")["m"]
    assert config.load_on_startup is True
    with pytest.raises(PresetError, match="load-on-startup"):
        parse_presets("[m]\nload-on-startup = sometimes\n")
