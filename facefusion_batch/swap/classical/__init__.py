"""The classical swap (the default on a fresh machine): the source photo's face warped onto each
target's face mesh, recoloured to its skin and blended in. No swap model runs here.

The stage and what it needs, one job a module:

- stage: `ClassicalSwapper`, the pipeline stage (source choice, warp maps, the paint call)
- settings: `ClassicalSettings` and the choices they take
- source: a source photo's face cut out and made ready to paint, once (`prepare_source`)
- features: masks of the features drawn from the mesh (eyes, lips, brows, hair), eye openness
- raster: the triangle rasteriser the warp maps come from
- shape: the target mesh moved toward the source's brows, nose, eyes and mouth
- symmetry: a turned source's squeezed side painted from its visible side (mirror fill)
- relight: the normals and turns the local colour relights through
- colour_track: the paint's colour statistics along a track
- lids: shut eyes told from the picture; fit: the source's eyes only where it can give them
- skin: `--mask skin` (what is not skin in front of the face); lip_shadow: the lip's shadow lifted
- smile_lines: the source's smile lines lifted (its expression, not its face); rims: glasses kept in front
- mapped: `--map`, each mapped person's faces painted from that person's source

The masks shared with the learned swap (swap/masks.py) and the mesh's regions (swap/regions.py)
stay beside it in swap/.
"""

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.swap.classical.features import eye_openness, temple_hair
from facefusion_batch.swap.classical.fit import held_eyes
from facefusion_batch.swap.classical.settings import EYES_MOUTH_CHOICES, ClassicalSettings, EyesMouth
from facefusion_batch.swap.classical.source import SourceFace, prepare_source, with_mirror
from facefusion_batch.swap.classical.stage import (
    OCCLUSION_CROP,
    OCCLUSION_TEMPLATE,
    ClassicalSwapper,
    far_eye_holds,
    swap_triangles,
)

__all__ = [
    "EYES_MOUTH_CHOICES",
    "OCCLUSION_CROP",
    "OCCLUSION_TEMPLATE",
    "ClassicalSettings",
    "ClassicalSwapper",
    "EyesMouth",
    "SourceFace",
    "eye_frame",
    "eye_openness",
    "far_eye_holds",
    "held_eyes",
    "prepare_source",
    "swap_triangles",
    "temple_hair",
    "with_mirror",
]
