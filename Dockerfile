FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
# Set PIP_EXTRA_INDEX_URL to PyTorch's CPU wheel index to avoid the CUDA wheels; the
# constraints file pins the torch version the project is tested with.
ARG PIP_EXTRA_INDEX_URL=""
RUN pip install --no-cache-dir -c constraints.txt -e .
ENV HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MODELS_DIR=/opt/yana/models
# The one-time builds (int8 embedding encoder, compiled kernels) in the image, not at first start.
RUN yana prepare
EXPOSE 8000 5555
CMD ["yana", "api", "--host", "0.0.0.0"]
