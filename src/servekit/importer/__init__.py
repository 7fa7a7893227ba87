"""servekit.importer: bring a source-convention layout folder in by running it, contained.

Face: :func:`extract_folder` (every node rank's entry on the fake platform, in a
bubblewrap sandbox, -> :class:`FolderFacts`), :func:`read_meta` (meta.yaml ->
:class:`SourceMeta`), :class:`ImportRefused` (one line, exit 2). ``platform/``
is the fake platform itself (rank table, fake tools, recorders, normalizer);
:func:`write_rank_table_file` is the one writer of a ModelArts rank table.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.importer.api import import_layout as import_layout, name_for as name_for
    from servekit.importer.contain import ImportRefused as ImportRefused
    from servekit.importer.extract import (
        FolderFacts as FolderFacts,
        SourceRef as SourceRef,
        extract_folder as extract_folder,
    )
    from servekit.importer.meta import SourceMeta as SourceMeta, read_meta as read_meta
    from servekit.importer.platform.harness import (
        default_groups as default_groups,
        write_rank_table_file as write_rank_table_file,
    )
    from servekit.importer.synthesize import HARDWARE as HARDWARE, port_runs as port_runs
    from servekit.importer.write import (
        SOURCE_FILE as SOURCE_FILE,
        dump_yaml as dump_yaml,
        summary as summary,
    )

__getattr__, __dir__ = lazy_face(__name__)
