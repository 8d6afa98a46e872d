# The container image, built and tested on this machine without a Docker
# engine or a registry (buildah and podman, storage under $(IMAGE_BUILD));
# see docs/DEPLOY.md, "Building and testing the image here".
.PHONY: image image-test image-clean
IMAGE_BUILD ?= build-image
IMAGE ?= cfdb-worker:test

image:
	IMAGE_BUILD=$(IMAGE_BUILD) IMAGE=$(IMAGE) scripts/image.sh

image-test: image
	IMAGE_BUILD=$(IMAGE_BUILD) IMAGE=$(IMAGE) scripts/image-test.sh

# Storage, cached base root file systems and logs; the next `make image`
# bootstraps again.
image-clean:
	-IMAGE_BUILD=$(IMAGE_BUILD) bash -c 'source scripts/image.sh && bah rm --all' >/dev/null 2>&1
	rm -rf $(IMAGE_BUILD)
