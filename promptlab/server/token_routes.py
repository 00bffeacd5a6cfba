"""`/v1/tokens`: an admin creates, lists and revokes the tokens people and services call
the server with (promptlab/facades/tokens.py). A token is in the answer that creates it
and nowhere else."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from promptlab.facades.tokens import TOKEN_ROLES
from promptlab.workbench import Workbench


class TokenIn(BaseModel):
    """A new token: whom it is for and what it may do."""

    name: str = Field(max_length=100, description="The person or service; recorded as actor.")
    role: str = Field(description=f"One of {', '.join(TOKEN_ROLES)}.")
    service: bool = Field(False, description="May act on behalf of a person it names.")


def add_token_routes(app: FastAPI) -> None:
    wb: Workbench = app.state.workbench

    @app.get("/v1/tokens")
    def list_tokens() -> list[dict[str, Any]]:
        """Every token (revoked ones too), never a token's secret."""
        return [record.as_dict() for record in wb.tokens.list()]

    @app.post("/v1/tokens", status_code=201)
    def create_token(body: TokenIn) -> dict[str, Any]:
        """A new token; `token` is shown in this answer only."""
        record, secret = wb.tokens.create(body.name, body.role, service=body.service)
        return {**record.as_dict(), "token": secret}

    @app.post("/v1/tokens/{token_id}/revoke")
    def revoke_token(token_id: str) -> dict[str, Any]:
        """The token stops working at once."""
        return wb.tokens.revoke(token_id).as_dict()
