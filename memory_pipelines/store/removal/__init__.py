"""Ways out of the store: forget an item, drop a project, erase an owner; the audit trail of every removal."""

from .audit import CLI_ACTOR, audit_trail
from .erase import erase_owner, owner_tables
from .forget import FORGETTABLE, drop_project, forget

__all__ = ["CLI_ACTOR", "FORGETTABLE", "audit_trail", "drop_project", "erase_owner", "forget", "owner_tables"]
