#pragma once
// Where an output image comes from, decided before any pixel is decoded. All coordinates are
// in the upright (EXIF-oriented) image.
//
// A plan has two rectangles because torchvision composes its transforms in two ways:
//  - RandomResizedCrop crops first, then resizes: the filter never sees pixels outside the
//    crop, so window == box.
//  - Resize then CenterCrop resizes the whole image, then crops: output pixels near the crop
//    edge are filtered with pixels outside it, so window == the whole image and box is the
//    crop mapped back to the source.

#include "loadscope/core/rng.h"

namespace loadscope::augment {

struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
};

struct CropPlan {
  Box box;     // source area mapped onto the output
  Box window;  // pixels the filter may read (integer-valued here)
  bool flip = false;
};

// torchvision.transforms.RandomResizedCrop.get_params, draw for draw (10 attempts, then the
// central fallback), with loadscope's Rng.
CropPlan plan_random_resized_crop(int width, int height, double scale_min, double scale_max,
                                  double ratio_min, double ratio_max, Rng& rng);

// torchvision Resize(shorter side = `resize`) followed by CenterCrop(out_h, out_w).
CropPlan plan_resize_center_crop(int width, int height, int resize, int out_w, int out_h);

// Plain resize of the whole image to the output size (aspect ratio not kept).
CropPlan plan_resize(int width, int height);

}  // namespace loadscope::augment
