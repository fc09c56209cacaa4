"""
Twisted's base classes as the type checker should see them; at run time each
name here is Twisted's own class.

  - L{Factory}: generic in the protocol it builds (C{Factory[P]}) from
    Twisted 26.4 on; on the older releases C{setup.cfg} allows it cannot be
    subscripted, so there C{Factory[P]} is plain Twisted C{Factory}.
  - L{Options} (C{twisted.python.usage}), L{Service} and L{MultiService}:
    Twisted does not annotate their methods yet, so each call to them
    (C{super().startService()}, C{setServiceParent}) would be an untyped call
    in the strictly checked packages; here they carry the signatures Twisted
    documents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.application import service
from twisted.internet import protocol
from twisted.python import usage

if TYPE_CHECKING:
    from collections.abc import Iterator

    from twisted.internet.defer import Deferred

    Factory = protocol.Factory

    class Options(usage.Options):
        def __init__(self) -> None: ...

    class Service(service.Service):
        def privilegedStartService(self) -> None: ...
        def startService(self) -> None: ...
        def stopService(self) -> Deferred[Any] | None: ...
        def setServiceParent(self, parent: service.IServiceCollection) -> None: ...

    class MultiService(service.MultiService, Service):
        def __init__(self) -> None: ...
        def privilegedStartService(self) -> None: ...
        def startService(self) -> None: ...
        def stopService(self) -> Deferred[Any]: ...
        def __iter__(self) -> Iterator[service.IService]: ...

else:
    Options = usage.Options
    Service = service.Service
    MultiService = service.MultiService
    if hasattr(protocol.Factory, "__class_getitem__"):
        Factory = protocol.Factory
    else:

        class Factory(protocol.Factory):
            """Twisted < 26.4: C{Factory[P]} is Twisted's C{Factory} itself."""

            def __class_getitem__(cls, _protocol: object) -> type[protocol.Factory]:
                return protocol.Factory
