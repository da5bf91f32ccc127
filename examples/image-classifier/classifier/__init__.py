"""A small image-classification training repository, as a team might have one: a map-style
Dataset with torchvision transforms, a DataLoader factory, a model and its training step. The
loadscope factory beside it is the swap the experiments measure."""
