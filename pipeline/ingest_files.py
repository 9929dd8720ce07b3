"""The file side of ingest, under its former name (``tests/test_ingest.py`` imports
``write_piece`` from here): the code lives in :mod:`pipeline.ingest.files`."""

from .ingest.files import FORMATS, Piece, assemble, data_files, file_format, write_piece

__all__ = ["FORMATS", "Piece", "assemble", "data_files", "file_format", "write_piece"]
