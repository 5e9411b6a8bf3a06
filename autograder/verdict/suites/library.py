"""The library operators the exercises refuse at torch's dispatcher, named once for the suites that refuse them (each
suite's REFUSED_OPS): called in a learner's worker, they fail, whatever route reached them (autograder.inside.worker;
the static reading, autograder.verdict.static, proves or flags the routes it sees)."""

ATTENTION_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                 "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                 "_native_multi_head_attention", "_transformer_encoder_layer_fwd")
NORM_OPS = ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm", "batch_norm",
            "native_batch_norm", "_native_batch_norm_legit", "rms_norm", "_fused_rms_norm")
