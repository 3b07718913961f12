"""Embedder on Amazon Bedrock (Titan Text Embeddings v2 through InvokeModel), chosen by configuration
instead of the local model. The index records `model_id`, so vectors of two models are never mixed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram.kernel.errors import Unavailable
from engram.kernel.ports import Vector


class BedrockEmbedder:
    def __init__(
        self,
        model_id: str = "amazon.titan-embed-text-v2:0",
        dim: int = 1024,
        client: Any = None,
        region: str = "us-east-1",
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client("bedrock-runtime", region_name=region)
        self._client = client
        self.model_id = model_id
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> Vector:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):  # Titan v2 embeds one text a call
            body = json.dumps({"inputText": text or " ", "dimensions": self.dim, "normalize": True})
            try:
                response = self._client.invoke_model(
                    modelId=self.model_id, body=body, contentType="application/json", accept="application/json"
                )
            except Exception as exc:  # botocore's errors: throttling, access, validation
                raise Unavailable(f"the embedding model is unavailable: {type(exc).__name__}") from exc
            vector = np.asarray(json.loads(response["body"].read())["embedding"], dtype=np.float32)
            if vector.shape != (self.dim,):
                raise Unavailable(f"the embedding model answered {vector.shape[0]} dimensions, expected {self.dim}")
            out[i] = vector / max(float(np.linalg.norm(vector)), 1e-12)
        return out
