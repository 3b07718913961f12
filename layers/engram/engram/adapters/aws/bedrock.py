"""Generator on Amazon Bedrock's Converse API (used when ENGRAM_GENERATOR=bedrock)."""

from __future__ import annotations

from typing import Any

from engram.kernel.errors import Unavailable


class BedrockGenerator:
    def __init__(self, model_id: str, region: str, client: Any = None) -> None:
        if client is None:
            import boto3

            client = boto3.client("bedrock-runtime", region_name=region)
        self._client = client
        self.model_id = model_id

    def generate(self, system: str, prompt: str, *, max_tokens: int = 512, temperature: float = 0.0) -> str:
        try:
            response = self._client.converse(
                modelId=self.model_id,
                system=[{"text": system}],
                messages=[{"role": "user", "content": [{"text": prompt}]}],
                inferenceConfig={"maxTokens": max_tokens, "temperature": temperature},
            )
        except Exception as exc:  # botocore's errors: throttling, access, validation
            raise Unavailable(f"the language model is unavailable: {type(exc).__name__}") from exc
        blocks = response["output"]["message"]["content"]
        return "".join(b.get("text", "") for b in blocks).strip()
