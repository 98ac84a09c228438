"""`/v1/artifacts/{sha256}`: compiled kernels by content address, and their metadata."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from tunehub.server.api.auth import ReadAccess
from tunehub.server.api.deps import ArtifactDep, SessionDep, WorkloadKeyQuery
from tunehub.server.kernels import kernel_meta

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"], dependencies=[ReadAccess])

# By artifact kind; anything else is plain bytes.
CONTENT_TYPES = {
    "so": "application/x-sharedlib",
    "cubin": "application/octet-stream",
    "ptx": "text/plain; charset=utf-8",
}
# Content-addressed: the bytes under a hash never change, so clients may keep them forever.
IMMUTABLE = "public, max-age=31536000, immutable"


@router.get(
    "/{sha256}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "The bytes"}},
)
def artifact(artifact: ArtifactDep) -> Response:
    """The artifact's bytes (a shared object, cubin or PTX), named `<sha256>.<kind>`."""
    return Response(
        artifact.data,
        media_type=CONTENT_TYPES.get(artifact.kind, "application/octet-stream"),
        headers={
            "ETag": f'"{artifact.sha256}"',
            "Cache-Control": IMMUTABLE,
            "Content-Disposition": f'attachment; filename="{artifact.sha256}.{artifact.kind}"',
        },
    )


@router.get("/{sha256}/meta")
def artifact_meta(
    artifact: ArtifactDep, s: SessionDep, workload: WorkloadKeyQuery = None
) -> dict[str, Any]:
    """The kernel's `metadata.json`: entry point, launch parameters, and the arguments of
    `workload` (whose records must have this artifact). Without `workload`, 409 where the
    artifact is the kernel of workloads whose argument shapes differ."""
    return kernel_meta(s, artifact, workload)
