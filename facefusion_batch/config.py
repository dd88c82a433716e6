"""The render settings, by their old address: a re-export of `facefusion_batch.settings`, whose
rooms each hold one job: `types` (the settings types and their choices), `options` (the option
table: every option of render, preview and plan once, and the settings built from it),
`checks` (the values' checks), `device` (device resolution on this machine) and
`output_checks` (the outputs and paths, checked on the host that renders).
"""

from __future__ import annotations

from facefusion_batch.runtime.nvml import list_gpus
from facefusion_batch.settings.checks import (
    MAX_BATCH_SIZE,
    MAX_THREADS,
    MAX_WINDOW_MS,
    MAX_WORKERS,
    THREADS_PER_CORE,
    check_compositing_outputs,
    validate,
    validate_choices,
    validate_face_filter,
    validate_mapping,
    validate_options,
    validate_swap,
)
from facefusion_batch.settings.device import DevicePlan, DeviceRequest, resolve_device
from facefusion_batch.settings.options import encoder_options, parse_mapping, render_settings
from facefusion_batch.settings.output_checks import (
    check_matte_run,
    check_parent_dir,
    check_writes,
    compositing_outputs,
    compositing_start_number,
    expand_template,
    files_read,
    option_field,
    template_fields,
    template_literal,
    validate_paths,
)
from facefusion_batch.settings.types import (
    BACKENDS,
    FACE_MODES,
    RECOGNISERS,
    SWAPPER_MODES,
    ClassicalSettings,
    DeviceSettings,
    EncoderSettings,
    ReferenceSettings,
    RenderSettings,
    SwapSettings,
    TrackSettings,
    settings_record,
)

DEFAULT_LIP_SHADOW = ClassicalSettings().lip_shadow
DEFAULT_FACE_PRESENCE = TrackSettings().on

__all__ = [
    "BACKENDS",
    "DEFAULT_FACE_PRESENCE",
    "DEFAULT_LIP_SHADOW",
    "FACE_MODES",
    "MAX_BATCH_SIZE",
    "MAX_THREADS",
    "MAX_WINDOW_MS",
    "MAX_WORKERS",
    "RECOGNISERS",
    "SWAPPER_MODES",
    "THREADS_PER_CORE",
    "ClassicalSettings",
    "DevicePlan",
    "DeviceRequest",
    "DeviceSettings",
    "EncoderSettings",
    "ReferenceSettings",
    "RenderSettings",
    "SwapSettings",
    "check_compositing_outputs",
    "check_matte_run",
    "check_parent_dir",
    "check_writes",
    "compositing_outputs",
    "compositing_start_number",
    "encoder_options",
    "expand_template",
    "files_read",
    "list_gpus",
    "option_field",
    "parse_mapping",
    "render_settings",
    "resolve_device",
    "settings_record",
    "template_fields",
    "template_literal",
    "validate",
    "validate_choices",
    "validate_face_filter",
    "validate_mapping",
    "validate_options",
    "validate_paths",
    "validate_swap",
]
