"""FaceFusion 3.8.1's own detection of pictures, as JSON: the reference of
tests/test_facefusion_detectors.py (tests/data/facefusion_detect_reference.json).

Run with FaceFusion's Python and source (it imports nothing of ffbatch's):

    FF_PYTHON scripts/facefusion_detect_reference.py --facefusion /path/to/facefusion \\
        --models MODELS_DIR --out OUT.json IMAGE...

MODELS_DIR holds the detector files under FaceFusion's names (the tests' stand-ins, and OpenCV's
YuNet as yunet_2023_mar.onnx) and arcface_w600k_r50.onnx. For each case of CASES, every picture
goes through FaceFusion's face_detector.detect_faces / detect_faces_by_angle per angle and
face_helper.apply_nms at get_nms_threshold, as face_creator.get_many_faces does (the 68-point
landmarker left out: --face-landmarker-score 0); SOURCE_CASE also gives the first kept face's
embedding from face_recognizer.calculate_face_embedding. The model sessions are onnxruntime's
CPU sessions of the files in MODELS_DIR, handed to FaceFusion in place of its inference pool.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# (face_detector_model, face_detector_size, face_detector_angles, face_detector_score)
CASES = {
    "yunet": ("yunet", "640x640", [0], 0.5),
    "yolo_face": ("yolo_face", "640x640", [0], 0.5),
    "yolo_face angles 0 90": ("yolo_face", "640x640", [0, 90], 0.5),
    "retinaface": ("retinaface", "640x640", [0], 0.5),
    "retinaface 320 angles 0 180 270": ("retinaface", "320x320", [0, 180, 270], 0.5),
    "scrfd 480": ("scrfd", "480x480", [0], 0.6),
    "many": ("many", "640x640", [0], 0.5),
}
# FaceFusion's face_detector_margin (top, right, bottom, left %), with the case's other settings
MARGIN_CASES = {
    "yunet margin 10 20 30 40": ("yunet", [10, 20, 30, 40]),
    "yolo_face angles 0 90 margin 25": ("yolo_face angles 0 90", [25, 25, 25, 25]),
}
SOURCE_CASE = "yunet"
KEPT = 24  # the best faces of each picture written (ffbatch keeps at most 64 a frame)
# face_landmarker_model cases, on the faces of the yunet case (face_landmarker_score 0.5)
LANDMARKERS = ("2dfan4", "peppa_wutz", "many")
LANDMARKER_SCORE = 0.5
FILES = {
    "retinaface": "retinaface_10g",
    "scrfd": "scrfd_2.5g",
    "yolo_face": "yoloface_8n",
    "yunet": "yunet_2023_mar",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--facefusion", type=Path, required=True)
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("images", nargs="+", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.facefusion))
    sys.argv = sys.argv[:1]
    import cv2
    import onnxruntime
    from facefusion import face_detector, face_landmarker, face_recognizer, state_manager
    from facefusion.face_helper import (
        apply_nms,
        convert_to_face_landmark_5,
        estimate_face_angle,
        get_nms_threshold,
    )

    def session(name: str) -> onnxruntime.InferenceSession:
        path = str(args.models / f"{name}.onnx")
        return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])

    detectors = {model: session(file) for model, file in FILES.items()}
    recogniser = {"face_recognizer": session("arcface_w600k_r50")}
    face_detector.get_inference_pool = lambda: detectors
    face_recognizer.get_inference_pool = lambda: recogniser
    landmarkers = {name: session(name) for name in ("2dfan4", "peppa_wutz", "fan_68_5")}
    face_landmarker.get_inference_pool = lambda: landmarkers
    state_manager.init_item("download_providers", ["github"])  # its model-set tables name the URLs
    images = [cv2.imread(str(p)) for p in args.images]
    out: dict = {"images": [p.name for p in args.images], "cases": {}, "margin_cases": {}}
    runs = [(case, case, [0, 0, 0, 0]) for case in CASES]
    runs += [(name, case, margin) for name, (case, margin) in MARGIN_CASES.items()]
    for name, case, margin in runs:
        model, size, angles, score = CASES[case]
        for key, value in (
            ("face_detector_model", model),
            ("face_detector_size", size),
            ("face_detector_margin", margin),
            ("face_detector_angles", angles),
            ("face_detector_score", score),
        ):
            state_manager.init_item(key, value)
        found = []
        for image in images:
            boxes, scores, points = [], [], []
            for angle in angles:
                if angle == 0:
                    b, s, p = face_detector.detect_faces(image)
                else:
                    b, s, p = face_detector.detect_faces_by_angle(image, angle)
                boxes += b
                scores += s
                points += p
            keep = apply_nms(boxes, scores, score, get_nms_threshold(model, angles)) if boxes else []
            keep = list(keep)[:KEPT]  # best first
            faces = {
                "box": [[round(float(v), 4) for v in boxes[i]] for i in keep],
                "score": [round(float(scores[i]), 7) for i in keep],
                "five": [[[round(float(v), 4) for v in xy] for xy in points[i]] for i in keep],
            }
            if name == SOURCE_CASE and len(keep):
                embedding, _ = face_recognizer.calculate_face_embedding(image, points[keep[0]])
                faces["embedding"] = [round(float(v), 6) for v in embedding]
            if name == SOURCE_CASE:
                faces["kept"] = [int(i) for i in keep]
                faces["five_raw"] = [points[i] for i in keep]
                faces["box_raw"] = [boxes[i] for i in keep]
            found.append(faces)
        out["cases" if name in CASES else "margin_cases"].setdefault(name, found)
    # create_faces' landmark steps on the yunet case's faces: 68/5, the angle, the landmarker, 5/68
    out["landmarks"] = {}
    for model in LANDMARKERS:
        state_manager.init_item("face_landmarker_model", model)
        per_image = []
        for image, faces in zip(images, out["cases"][SOURCE_CASE], strict=True):
            rows: dict = {"angle": [], "score": [], "five68": []}
            for five, box in zip(faces["five_raw"], faces["box_raw"], strict=True):
                angle = estimate_face_angle(face_landmarker.estimate_face_landmark_68_5(five))
                points68, score = face_landmarker.detect_face_landmark(image, box, angle)
                refined = convert_to_face_landmark_5(points68) if score > LANDMARKER_SCORE else five
                rows["angle"].append(int(angle))
                rows["score"].append(round(float(score), 6))
                rows["five68"].append([[round(float(v), 4) for v in xy] for xy in refined])
                if model == "2dfan4" and "embedding" not in rows:  # the best face's, from its 5/68
                    embedding, _ = face_recognizer.calculate_face_embedding(image, refined)
                    rows["embedding"] = [round(float(v), 6) for v in embedding]
            per_image.append(rows)
        out["landmarks"][model] = per_image
        # the landmarker on a face turned by each angle (detect_face_landmark's rotation), the
        # second picture's best face
        box = out["cases"][SOURCE_CASE][1]["box_raw"][0]
        out.setdefault("turned", {})[model] = {}
        for angle in (90, 180, 270):
            points68, score = face_landmarker.detect_face_landmark(images[1], box, angle)
            out["turned"][model][str(angle)] = {
                "points68": [[round(float(v), 4) for v in xy] for xy in points68],
                "score": round(float(score), 6),
            }
    for faces in out["cases"][SOURCE_CASE]:
        del faces["kept"], faces["five_raw"], faces["box_raw"]
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
