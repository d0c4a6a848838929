// The dashboard's values as text: sizes, durations, where a model runs (loaded before dashboard.js).
"use strict";

function bytes(n) {
  if (n == null) return "?";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

function seconds(s) {
  if (s == null) return "—";
  if (s < 10) return s.toFixed(1) + " s";
  if (s < 60) return Math.round(s) + " s";
  return Math.floor(s / 60) + " min " + Math.ceil(s % 60) + " s";
}

// Binary units, as llama.cpp's load log and nvidia-smi give device memory.
function mebibytes(n) {
  const mib = n / 1048576;
  return mib < 1024 ? Math.round(mib) + " MiB" : (mib / 1024).toFixed(1) + " GiB";
}

// Where a loaded model runs, as its worker's instance_ready said (GET /models `offload`): "CPU" when no
// buffer went to a GPU, else the GPUs, the layers offloaded and the memory on each:
// "Vulkan0 · 19/19 layers · 65 MiB", "Vulkan0 + Vulkan1 · 19/19 layers · 40 MiB + 25 MiB".
// Empty when not loaded, or when the worker did not say (a log from before issue 31).
function deviceText(m) {
  const offload = m.offload;
  if (!offload) return "";
  const used = new Map(offload.devices.map((d) => [d, 0]));
  for (const use of offload.memory) {
    if (use.device !== "CPU") used.set(use.device, (used.get(use.device) || 0) + use.total_bytes);
  }
  if (!used.size) return "CPU";
  // Layers split across GPUs (-sm layer) are counted once, for them all.
  const layers = offload.offloaded + "/" + offload.layers + " layers";
  return [[...used.keys()].join(" + "), layers, [...used.values()].map(mebibytes).join(" + ")].join(" · ");
}

// A model's prompt cache saved on disk (GET /models `prompt_cache`, issue 35): "120.0 KB · 2 files", empty when none.
function promptCacheText(m) {
  const cache = m.prompt_cache;
  if (!cache || !cache.files.length) return "";
  return bytes(cache.bytes) + " · " + cache.files.length + (cache.files.length === 1 ? " file" : " files");
}
