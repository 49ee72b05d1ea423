"""The ``openai`` runner: one chat turn against any OpenAI-compatible endpoint.

Configuration (validated at create/update, ``InvalidSchedule`` naming ``runner.<key>``)::

    {"type": "openai", "base_url": "https://api.example.org/v1", "model": "gpt-4o-mini",
     "api_key_env": "OPENAI_API_KEY", "system": "...", "temperature": 0.2, "max_tokens": 800}

The key comes from exactly one of ``api_key_env`` (an environment variable of the service) or
``api_key_secret`` (the name of the schedule owner's stored secret, ``core.secrets``, resolved
by the engine into ``RunRequest.secrets``).

One attempt is one ``POST {base_url}/chat/completions`` carrying ``[system?] + history +
[prompt]`` (history as role/content pairs, oldest first). A reply is returned as
``RunOutcome(output=reply, turns=[user turn, assistant turn])`` with the run id on each turn;
the engine appends them to the task's conversation when it records the success, so a
``persistent`` schedule's next run sees this one.

Classification: 408, 429, 5xx, timeouts and connection failures are transient
(``TransientRunError``); any other non-2xx status is permanent (``RunPermanentError`` with the
status and the server's message, truncated); a 2xx that is not a chat completion is permanent.

The API key is read (from the environment or the request's secrets) at each attempt and lives
only in the request headers: this module never stores it on an object, and every message it
raises has the key replaced by ``[redacted]`` (servers sometimes echo the key they refused).

- ``config``: ``OpenAIRunnerType``, the configuration validated and built;
- ``runner``: ``OpenAIRunner``, one attempt: the messages, the key, the exchange;
- ``reply``: reading the reply, its error message or its text, and the key's redaction.
"""
