# One image for every tunehub service: the API, the tuner and the workers.
#
#   docker build -t tunehub .                                  # CPU (python:3.11-slim)
#   docker build -t tunehub-gpu \
#       --build-arg BASE_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04 .   # GPU workers: nvcc
#
# The GPU image differs only in its base: the CUDA devel images bring nvcc and ptxas (the
# worker's CUDA builder), and the NVIDIA container runtime brings the driver at run time.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# gcc and OpenMP build and run the CPU kernels. The CUDA images have no Python of their own
# that pip may install into: they get the distribution's python3 and a virtual environment,
# which the slim image uses too, so both run tunehub from /opt/venv.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 \
    && if ! python3 -c "import ensurepip" 2>/dev/null; then \
        apt-get install -y --no-install-recommends python3 python3-venv; fi \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /opt/tunehub
COPY pyproject.toml README.md ./
COPY tunehub tunehub
COPY schemas schemas
COPY compiler compiler
COPY targets targets
COPY runtime runtime
COPY worker worker
COPY server server
COPY client client
COPY frontends frontends
COPY migrations migrations
COPY examples examples
RUN pip install ".[all]"

# Not root; the home holds the SQLite database when no TUNEHUB_DATABASE_URL is given.
RUN useradd --create-home --uid 10001 tunehub
USER tunehub
ENV TUNEHUB_HOME=/home/tunehub/.tunehub
EXPOSE 8000
CMD ["tunehub", "--help"]
