"""The one change a Vulkan build makes to the vendored llama.cpp: a guard for Vulkan headers older than 1.3.272.

ggml-vulkan (at the commit llama-cpp-python 0.3.36 vendors) creates its instance with a
``vk::LayerSettingsCreateInfoEXT`` chained in, to turn on the validation layer's best-practice checks when
``GGML_VK_VALIDATE`` asks for them. ``VK_EXT_layer_settings`` first appears in Vulkan-Headers 1.3.272; Debian
12 ships 1.3.239, where the build stops with ``'LayerSettingEXT' is not a member of 'vk'`` (issue 38). The guard
below compiles that block only where the headers define the extension, and otherwise creates the instance
without the ``pNext``: all it loses is the best-practice setting of a validation layer nobody runs here.

The build applies it to its own copy of the sdist's tree (``llama_build``), never to the unpacked sources the
other tools read, and only when the headers are older (:func:`needs_guard`); with newer headers the sources
are built as they come. Standard library only, as ``llama_build``.
"""

from __future__ import annotations

from pathlib import Path

LAYER_SETTINGS_HEADER = 272
"""The ``VK_HEADER_VERSION`` (of Vulkan 1.3) that first defines ``VK_EXT_layer_settings``."""
FILE = Path("vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp")
"""The patched file, relative to the unpacked sdist (llama_cpp_python-VERSION/)."""
MARK = "// modelrouter: Vulkan-Headers older than 1.3.272 lack VK_EXT_layer_settings"
_FIRST = "    VkBool32 enable_best_practice = layer_settings;\n"
_LAST = (
    "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, "
    "&layer_setting_info);\n"
)
_WITHOUT = (
    "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);\n"
)


class PatchDoesNotApply(SystemExit):
    """The vendored source no longer has the lines the guard wraps (a new llama-cpp-python): the message
    says to check whether the guard is still needed."""


def needs_guard(header_version: int | None) -> bool:
    """Whether headers of this ``VK_HEADER_VERSION`` need the guard (None: unknown, so guard; the guarded
    source compiles on every version, it only drops a validation-layer setting)."""
    return header_version is None or header_version < LAYER_SETTINGS_HEADER


def guard(source: str) -> str:
    """``ggml-vulkan.cpp``'s text with the layer-settings block guarded; unchanged when already guarded.
    Raises :class:`PatchDoesNotApply` when the block is not there exactly once."""
    if MARK in source:
        return source
    if source.count(_FIRST) != 1 or source.count(_LAST) != 1 or source.index(_FIRST) > source.index(_LAST):
        msg = (
            f"{FILE}: the VK_EXT_layer_settings block is not where devtools/vulkan_patch.py expects it "
            "(a new llama-cpp-python?): check whether the guard is still needed, and update or drop it"
        )
        raise PatchDoesNotApply(msg)
    start, end = source.index(_FIRST), source.index(_LAST) + len(_LAST)
    guarded = f"#ifdef VK_EXT_layer_settings  {MARK}\n{source[start:end]}#else\n{_WITHOUT}#endif\n"
    return source[:start] + guarded + source[end:]


def apply(tree: Path) -> Path:
    """Guard ``ggml-vulkan.cpp`` in the unpacked sdist ``tree`` (a copy the build owns); the file patched."""
    path = tree / FILE
    path.write_text(guard(path.read_text()))
    return path
