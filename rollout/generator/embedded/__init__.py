"""The embedded CPU generator server: a process that answers SGLang's HTTP API (native, OpenAI-compatible
and admin routes) over one engine. The rollout never imports it; `areal-mem generator serve` starts it."""
