"""The Vulkan build's one patch (devtools/vulkan_patch.py): when it is needed, and that it applies to the
ggml-vulkan.cpp that llama-cpp-python vendors, on a copy, leaving the shared sources alone."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from devtools import llama_build, vulkan_patch


@pytest.mark.parametrize(("version", "needed"), [(239, True), (271, True), (272, False), (313, False), (None, True)])
def test_the_guard_is_needed_below_vulkan_headers_1_3_272(version: int | None, needed: bool) -> None:
    assert vulkan_patch.needs_guard(version) is needed


def _vendored() -> Path:
    return llama_build.vendored_llama_cpp().parents[1] / vulkan_patch.FILE


def test_the_guard_applies_to_the_vendored_file_and_only_wraps_the_layer_settings_block(tmp_path: Path) -> None:
    shared = _vendored()
    before = shared.read_text()
    copy = tmp_path / "llama_cpp_python-x" / vulkan_patch.FILE
    copy.parent.mkdir(parents=True)
    shutil.copy(shared, copy)
    assert vulkan_patch.apply(tmp_path / "llama_cpp_python-x") == copy
    after = copy.read_text()
    assert shared.read_text() == before, "the shared unpacked sources must stay as they came"
    guarded = after[
        after.index("#ifdef VK_EXT_layer_settings") : after.index("#endif\n", after.index(vulkan_patch.MARK))
    ]
    assert "vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);" in guarded
    assert (
        "#else\n    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
        in guarded
    )
    # Nothing but the three preprocessor lines and the fallback line was added; nothing was removed.
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [d for d in diff if d.startswith("- ")]
    added = [d[2:] for d in diff if d.startswith("+ ")]
    assert [a.split("  //")[0] for a in added] == [
        "#ifdef VK_EXT_layer_settings",
        "#else",
        "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);",
        "#endif",
    ]
    assert vulkan_patch.guard(after) == after, "applying twice changes nothing"


def test_a_source_without_the_block_fails_saying_to_revisit_the_guard() -> None:
    with pytest.raises(vulkan_patch.PatchDoesNotApply, match="check whether the guard is still needed"):
        vulkan_patch.guard("int main() { return 0; }\n")
