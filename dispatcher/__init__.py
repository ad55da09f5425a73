"""toolrelay's tool dispatcher: register tools, validate, confirm, run, report.

The public API is re-exported here; see specs/tool-dispatcher.md.
"""

from dispatcher.confirmations import (
    ConfirmationBroker,
    ConfirmationRequest,
    Resolution,
    UnknownConfirmation,
)
from dispatcher.dispatcher import ToolDispatcher
from dispatcher.errors import (
    ConfirmationTimeout,
    ToolCancelled,
    ToolError,
    ToolErrorClass,
    ToolExecutionError,
    ToolNotFound,
    ToolPermissionDenied,
    ToolRegistrationError,
    ToolTimeout,
    ToolUserDenied,
    ToolValidationFailed,
    WorkspaceEscape,
)
from dispatcher.plugins import ENTRY_POINT_GROUP, PluginLoadError, import_factory, load_plugins
from dispatcher.policy import (
    AutoAllowPolicy,
    ConfirmationPolicy,
    ConfirmMode,
    PolicyConfig,
    PolicyQuery,
    RulePolicy,
)
from dispatcher.publisher import EventPublisher, NullPublisher
from dispatcher.schema_subset import CompiledValidator, InputError, check_subset
from dispatcher.session import DispatchSession
from dispatcher.tool import (
    BaseTool,
    CallRating,
    ConfirmationPreview,
    Tool,
    ToolContext,
    ToolFactory,
    ToolOutput,
)
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition, ToolResultBlock, ToolUseBlock

__all__ = [
    "ENTRY_POINT_GROUP",
    "AutoAllowPolicy",
    "BaseTool",
    "CallRating",
    "CompiledValidator",
    "ConfirmMode",
    "ConfirmationBroker",
    "ConfirmationPolicy",
    "ConfirmationPreview",
    "ConfirmationRequest",
    "ConfirmationTimeout",
    "DispatchSession",
    "EventPublisher",
    "InputError",
    "NullPublisher",
    "PluginLoadError",
    "PolicyConfig",
    "PolicyQuery",
    "Resolution",
    "RulePolicy",
    "SideEffects",
    "Tool",
    "ToolCancelled",
    "ToolContext",
    "ToolDefinition",
    "ToolDispatcher",
    "ToolError",
    "ToolErrorClass",
    "ToolExecutionError",
    "ToolFactory",
    "ToolNotFound",
    "ToolOutput",
    "ToolPermissionDenied",
    "ToolRegistrationError",
    "ToolResultBlock",
    "ToolTimeout",
    "ToolUseBlock",
    "ToolUserDenied",
    "ToolValidationFailed",
    "UnknownConfirmation",
    "WorkspaceEscape",
    "WorkspaceFileAPI",
    "check_subset",
    "import_factory",
    "load_plugins",
]
