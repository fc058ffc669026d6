"""How bytes are encoded: typed message fields, bounded CBOR decoding and whole-body compression."""
