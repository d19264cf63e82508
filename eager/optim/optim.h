// Every optimizer and schedule in one include:
//
//   #include "eager/optim/optim.h"
//
// optimizer.h    Optimizer: step(), zero_grad(), lr()/set_lr()
// sgd.h          SGD (momentum, dampening, weight decay, Nesterov)
// adam.h         Adam, AdamW
// rmsprop.h      RMSprop
// adagrad.h      Adagrad
// lr_schedule.h  StepLR, CosineAnnealingLR, LambdaLR, WarmupCosineLR, OneCycleLR
// clip_grad.h    clip_grad_norm_
#pragma once

#include "eager/optim/adagrad.h"
#include "eager/optim/adam.h"
#include "eager/optim/clip_grad.h"
#include "eager/optim/lr_schedule.h"
#include "eager/optim/optimizer.h"
#include "eager/optim/rmsprop.h"
#include "eager/optim/sgd.h"
