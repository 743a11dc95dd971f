"""The demo corpus (`data/demo.json`), its loader (`corpus`) and its logged context sessions (`sessions`)."""
