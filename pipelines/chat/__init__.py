"""Chat fast path: a LangGraph graph over the dialogue state, inside the chat deadline.

from pipelines.chat import ChatInput, run_chat, default_deps
out = await run_chat(ChatInput("小樽のお酒ある？"), default_deps())
"""

from pipelines.chat.graph import ChatInput, ChatOutput, run_chat
from pipelines.chat.nodes import ChatDeps
from pipelines.chat.service import default_deps, default_turn_log

__all__ = ["ChatDeps", "ChatInput", "ChatOutput", "default_deps", "default_turn_log", "run_chat"]
