"""Layouts and codes shared by the controller's components."""

from bpsa.gateware.common.enums import hw_enum
from bpsa.spec import errors

__all__ = ["AccelError"]

#: STATUS.ERROR values checked before the layer starts (:class:`bpsa.spec.errors.AccelError`).
AccelError = hw_enum(errors.AccelError, 8)
