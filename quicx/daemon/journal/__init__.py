"""
The write-ahead journal: accepted tasks survive a crash of the daemon.

The journal is one append-only file.  It starts with an 8-byte magic line and
then holds records, each framed as::

    u32 body length | u32 CRC-32 of the body | body

and each body starts with a kind byte:

  - SUBMIT: C{u32 task id, u8 type length, type, payload} -- written before
    the task's OK is sent;
  - DONE / FAILED: C{u32 task id} -- written when the outcome arrives;
  - CHECKPOINT: C{u32 last task id} -- the id counter, at the head of a
    compacted file (written by older versions);
  - RESERVE: C{u32 task id} -- task ids up to this one may be handed out:
    written, and synced, before any of them is.  After a crash the id
    counter resumes past the last reservation, so an id told to a producer
    is never issued again, whatever the fsync policy.

Replaying is idempotent: a SUBMIT of an id already live replaces it, an
outcome for an id not live is ignored.  The live tasks are the SUBMITs without
an outcome, in the order they were first submitted.

A crash can leave a torn last record -- one cut short, or a tail of zeros --
and L{recover} cuts it.  A record that is whole in length but fails its
checksum is not torn but damaged: L{recover} refuses the file, naming it and
the offset, and L{repair} keeps the good records and moves the file aside.

A failed append is cut back off the file before its tasks are refused, so a
task whose producer heard ERROR never comes back after a restart.

Writes happen on one thread of the journal's own, never on the reactor.  With
C{fsync = always} a task's OK waits for its record to reach the disk; every
record appended during one reactor turn (and while the previous sync ran)
shares one C{fdatasync}: group commit.
"""
