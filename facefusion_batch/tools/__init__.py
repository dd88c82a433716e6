"""Commands that look across rooms: doctor, models, engines, calibration, preview."""
