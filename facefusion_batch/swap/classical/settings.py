"""The classical swap's settings: `ClassicalSettings` (what `--blend`, `--colour`, `--eyes-mouth`,
`--shape`, `--lip-shadow` and the rest set) and the choices they take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from facefusion_batch.kernels.base import (
    BLEND_MODES,
    COLOUR_MODES,
    SHADE_LIMIT,
    TINT_LIMIT,
    BlendMode,
    ColourMode,
    PaintSettings,
)
from facefusion_batch.swap.classical.colour_track import COLOUR_WINDOW

EyesMouth = Literal["eyes", "target", "source"]
EYES_MOUTH_CHOICES: tuple[EyesMouth, ...] = get_args(EyesMouth)
# how far the shadow under a top-lit source's lower lip is lifted toward its chin's skin
# (swap/classical/lip_shadow.py): a grey goatee on pale targets weighed against identity, which the
# recogniser reads in it; `--lip-shadow` leaves the choice to the user (docs/default-swap.md)
LIP_SHADOW_LIFT = 0.3


@dataclass(frozen=True)
class ClassicalSettings:
    blend: BlendMode = "multiband"
    # whose eyes and mouth show: eyes, the source's eyes warped to the target's eyelids and the
    # target's inner mouth (teeth, tongue); target, the target's own; source, the source's both
    eyes_mouth: EyesMouth = "eyes"
    colour: ColourMode = "local"  # local (target light and tint) | global (LAB mean/std) | none
    colour_strength: float = 1.0  # 0–1: how far the colour moves toward the target
    shading_scale: float = 0.12  # local colour: Gaussian sigma of the carried shading, in IOD
    shading_limit: tuple[float, float, float] = (60.0, 30.0, 30.0)  # local colour: LAB bounds
    tint_limit: float = TINT_LIMIT  # local colour: tint left off at the finer scale (inf: free)
    # local colour: how much darker than the target's skin the source's shading may paint at that
    # finer scale (8-bit L levels; inf: free). SHADE_LIMIT (kernels/base.py) says what each costs
    shade_limit: float = SHADE_LIMIT
    forehead_margin: float = 0.1  # IOD above the brows kept from the source (hair stays out)
    # IOD over which the mask ramps from 0 to 1 at its edges: narrower transfers more identity,
    # but at 0.1 the top edge shows as a line across the forehead (docs/default-swap.md)
    feather: float = 0.15
    # how far the target mesh moves toward the source's brows, nose, eye spacing and size
    # (swap/classical/shape.py); 0 paints the source's texture on the target's own geometry
    shape: float = 1.0
    # the mouth's width and lip thickness from a frontal source too (swap/classical/shape.py): identity,
    # with the inner mouth kept only to the inner lip line (docs/default-swap.md)
    mouth_shape: bool = True
    # the squeezed side of a turned source face painted from its visible side (swap/classical/symmetry.py)
    mirror_fill: bool = True
    # the source texture blurred to the target face's sharpness (a soft face stays soft)
    match_sharpness: bool = True
    # the target's own grain carried onto a face smoother than it (a noisy shot stays noisy)
    match_grain: bool = True
    # the camera's shutter angle in degrees (180: open half of each frame's interval): a moving
    # face's swap is smeared along its track's motion as far as the shutter was open, the plate's
    # own motion blur; 0: not smeared (footage shot at a fast shutter has sharp moving faces)
    shutter: float = 0.0
    # closed eyes the mesh keeps open (a shut or lowered lid) told from the picture (swap/classical/lids.py)
    lids: bool = True
    # do no harm (swap/classical/fit.py): a face whose eyes are in a state the source photo cannot give
    # (closed, wider, looking elsewhere, turned past the photo) keeps its own eyes whole (with
    # eyes_mouth "eyes"); a face in profile is painted weaker or not at all (with every eyes_mouth)
    fit: bool = True
    # the dark rims of glasses round the eyes (and their bridge), found on the picture, stay in
    # front of the swap, and a source photo's are painted out of its face before it is cut out
    # (swap/classical/rims.py); off: the target's are painted over, the source's painted on
    glasses: bool = True
    # 0–1: how far the shadow under a top-lit source's lower lip is lifted toward its chin's skin
    # before it is painted (swap/classical/lip_shadow.py; LIP_SHADOW_LIFT says what each step costs): 1
    # takes the grey goatee it leaves on pale targets away, and some of the source's identity
    lip_shadow: float = LIP_SHADOW_LIFT
    # 0–1: how far the source photo's smile lines (nose wing to mouth corner) are lifted toward the
    # cheek's skin round them before it is painted (swap/classical/smile_lines.py): they are its
    # expression, and a turned target squeezed them into a dark line beside the nose
    smile_lines: float = 1.0
    # frames of a track whose median colour statistics the paint follows (swap/classical/colour_track.py):
    # something passing in front of a face for a few frames does not pump it; 0: each frame's own
    colour_window: int = COLOUR_WINDOW
    # local colour relights the source with the target's shading first, spherical harmonics
    # through the mesh's normals (swap/classical/relight.py, kernels/formulas.py relight): the judging half
    # agreed (docs/default-swap.md)
    relight: bool = True

    def __post_init__(self) -> None:
        if self.colour not in COLOUR_MODES:
            raise ValueError(f"colour must be one of {', '.join(COLOUR_MODES)}")
        if self.blend not in BLEND_MODES:
            raise ValueError(f"blend must be one of {', '.join(BLEND_MODES)}")
        if self.eyes_mouth not in EYES_MOUTH_CHOICES:
            raise ValueError(f"eyes_mouth must be one of {', '.join(EYES_MOUTH_CHOICES)}")

    @property
    def paint(self) -> PaintSettings:
        return PaintSettings(
            colour=self.colour,
            colour_strength=self.colour_strength,
            blend=self.blend,
            shading_limit=self.shading_limit,
            tint_limit=self.tint_limit,
            shade_limit=self.shade_limit,
            match_sharpness=self.match_sharpness,
            match_grain=self.match_grain,
            relight=self.relight,
        )
