"""How bytes are encoded: typed message fields, bounded CBOR decoding, whole-body compression."""
