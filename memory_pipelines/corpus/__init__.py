"""The bundled demo corpus: a bilingual history of an agent team (see `build_demo.py`)."""
