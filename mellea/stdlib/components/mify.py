"""``mify``: make any Python object or class usable with sessions (``act``, ``query``,
``transform``) by giving it the MObject methods."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from mellea.core.base import TemplateRepresentation
from mellea.stdlib.components.mobject import (
    MObjectMethods,
    MObjectProtocol,
    Query,
    Transform,
    documented,
    member_tools,
    public_methods,
)

T = TypeVar("T")

_SETTINGS = (
    "_query_type",
    "_transform_type",
    "_fields_include",
    "_fields_exclude",
    "_funcs_include",
    "_funcs_exclude",
    "_template",
    "_template_order",
    "_parsing_func",
    "_stringify_func",
)


def _narrow(items: dict[str, Any], include: set[str] | None, exclude: set[str] | None) -> dict:
    """``include`` wins over ``exclude``; a name in both is left out."""
    exclude = exclude or set()
    if include is not None:
        return {k: v for k, v in items.items() if k in include and k not in exclude}
    return {k: v for k, v in items.items() if k not in exclude}


@runtime_checkable
class MifiedProtocol(MObjectProtocol, Protocol):
    """The methods and settings ``mify`` gives an object or class."""

    _query_type: type = Query
    _transform_type: type = Transform
    _fields_include: set[str] | None = None
    _fields_exclude: set[str] | None = None
    _funcs_include: set[str] | None = None
    _funcs_exclude: set[str] | None = None
    _template: str | None = None
    _template_order: str | list[str] | None = None
    _parsing_func: Callable[[str], object] | None = None
    _stringify_func: Callable[[object], str] | None = None

    parts = MObjectMethods.parts
    get_query_object = MObjectMethods.get_query_object
    get_transform_object = MObjectMethods.get_transform_object
    _parse = MObjectMethods._parse
    parse = MObjectMethods.parse

    def content_as_string(self) -> str:
        """The object as text: ``stringify_func(obj)`` when given, else ``str(obj)``.

        [no-index]
        """
        fn = self._stringify_func
        if fn is None:
            return str(self)
        return fn() if inspect.ismethod(fn) else fn(self)  # type: ignore[call-arg]

    def _get_all_members(self) -> dict[str, Callable]:
        """The methods offered as tools: documented ones (without ``[no-index]``) unless
        ``funcs_include`` names them.

        [no-index]
        """
        own = {k: v for k, v in public_methods(self).items() if k not in _PROTOCOL_METHODS}
        if self._funcs_include is not None:
            return _narrow(own, self._funcs_include, self._funcs_exclude)
        return _narrow(documented(own), None, self._funcs_exclude)

    def _get_all_fields(self) -> dict[str, Any]:
        """The object's data attributes (not methods, dunders or mify's settings),
        narrowed by ``fields_include`` / ``fields_exclude``.

        [no-index]
        """
        fields = {
            name: value
            for name, value in inspect.getmembers(
                self, lambda m: not inspect.isfunction(m) and not inspect.ismethod(m)
            )
            if not name.startswith("__") and name not in _SETTINGS and name != "_is_protocol"
        }
        return _narrow(fields, self._fields_include, self._fields_exclude)

    def format_for_llm(self) -> TemplateRepresentation:
        """The object as text (or its chosen fields), with its methods as tools.

        [no-index]
        """
        args: dict[str, Any] = {"content": self.content_as_string()}
        if self._fields_include or self._fields_exclude:
            args = self._get_all_fields()
        order = self._template_order or ["*", "MObject"]
        return TemplateRepresentation(
            obj=self,
            args=args,
            tools=member_tools(self._get_all_members()),
            fields=[],
            template=self._template,
            template_order=[order] if isinstance(order, str) else list(order),
        )


_PROTOCOL_METHODS = {
    name
    for name, member in vars(MifiedProtocol).items()
    if inspect.isfunction(member) and not name.startswith("__")
}


def mify(*args: Any, **kwargs: Any) -> Any:
    """Give an object, or a class's instances, the MObject methods.

    ``mify(obj)`` changes ``obj`` in place and returns it; ``@mify`` and
    ``@mify(...)`` decorate a class. Keyword arguments: ``query_type``,
    ``transform_type`` (the components query and transform use),
    ``fields_include`` / ``fields_exclude`` (show these data attributes instead of
    the object's text; pair with ``template``), ``funcs_include`` /
    ``funcs_exclude`` (the methods offered as tools; by default every documented
    one without ``[no-index]``), ``template`` (a Jinja template over the args),
    ``template_order``, ``parsing_func`` (kept, unused, as upstream) and
    ``stringify_func`` (``obj -> str``, the object's text). Include wins over
    exclude. An object that already is an MObject is returned unchanged.
    """
    obj = kwargs.pop("obj", None)
    if len(args) == 1:
        obj = args[0]
    elif args:
        raise TypeError("mify takes one object or class")
    settings = {
        "_query_type": kwargs.pop("query_type", Query),
        "_transform_type": kwargs.pop("transform_type", Transform),
        "_fields_include": kwargs.pop("fields_include", None),
        "_fields_exclude": kwargs.pop("fields_exclude", None),
        "_funcs_include": kwargs.pop("funcs_include", None),
        "_funcs_exclude": kwargs.pop("funcs_exclude", None),
        "_template": kwargs.pop("template", None),
        "_template_order": kwargs.pop("template_order", None),
        "_parsing_func": kwargs.pop("parsing_func", None),
        "_stringify_func": kwargs.pop("stringify_func", None),
    }
    if kwargs:
        raise TypeError(f"mify got unexpected arguments: {', '.join(sorted(kwargs))}")

    def apply(target: T) -> T:
        if isinstance(target, MifiedProtocol | MObjectProtocol):
            return target
        is_class = inspect.isclass(target)
        existing = dict(inspect.getmembers(target))
        for name in _PROTOCOL_METHODS:
            if name not in existing:
                fn = vars(MifiedProtocol)[name]
                setattr(target, name, fn if is_class else types.MethodType(fn, target))
        for name, value in settings.items():
            setattr(target, name, value)
        return target

    return apply(obj) if obj is not None else apply


__all__ = ["MifiedProtocol", "mify"]
