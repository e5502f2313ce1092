// The same bits on every CPU and compiler: the logits of fixed prompts on the shared
// models, hashed (sha256) and compared with golden hashes written in this file. Every
// build runs it: native, -march=x86-64 and x86-64-v3, clang (the sanitized tree) and
// aarch64 under qemu (.ci/run). A build whose kernels compute one different bit fails
// here, naming the file and the first position whose row of logits differs.
//
// The models are the shared ones and, from tests/data, mixtures of experts
// (qwen3moe-tiny-F32, gpt-oss-tiny-F32) and ik_llama.cpp's files of the table types
// (iq4_nl, iq4_xs, mxfp4). Each runs the first 40 ids of ../shared/reference/gguf/prompt.ids (modulo the
// model's vocabulary) as a prefill of 24 ids followed by 16 decode steps, with 1 and
// with 2 threads: both thread counts must give the golden bits.
//
// The default numerics give one set of bits everywhere. So does the fast mode
// (--fast-matmul) of the block types: int8 activations and exact integer sums, whether
// summed by AVX2, VNNI, 512-bit planes or the portable loop. The fast mode of f16 and
// bf16 weights uses AVX512-BF16's dot products where the CPU has them (the golden rows
// below were recorded on one: whether every such CPU rounds alike is not tested here)
// and keeps the default numerics elsewhere, which the test asserts.
//
// After a deliberate change of the numerics, KVDECODE_PRINT_GOLDEN=1 prints the
// table below anew (the new bits must first pass the reference tests).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvdecode/matmul/build_info.hpp"
#include "kvdecode/io/checkpoint.hpp"
#include "kvdecode/io/gguf_model.hpp"
#include "kvdecode/cache/kv_cache.hpp"
#include "kvdecode/model/transformer.hpp"
#include "sha256.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;

struct Golden {
  const char* file;       ///< under ../shared/models, or under tests/data when it starts with "data/"
  bool fast;              ///< the fast mode (--fast-matmul) instead of the default numerics
  const char* all;        ///< sha256 of every position's logits, float32 bytes in order
  const char* positions;  ///< the first 8 hex digits of each position's own sha256, joined
};

constexpr int kPrompt = 40, kPrefill = 24;

// Written by KVDECODE_PRINT_GOLDEN=1 on an AMD EPYC (Zen 4 class, AVX-512 with VNNI),
// GCC 12 -march=native; every build in .ci/run gives the same.
const Golden kGolden[] = {
    {"stories260K.bin", false,
     "14390e9d668145ae4c57daa77318f2cc969f8b624461201a7787d9a5016f3789",
     "f105182df472c9d448151aef7ce94faacbd3911b3b6fe9af41d8df885de05cea4f106026b586e46fc996375003c155ce16f9dea472964440a03cfb016bdc132123e205754a21ba89505ada858cb79b8d75051aa54da04a3dac8e3a2c5bc896fb810a284c8c5ce257fbcd84f7eef986b550de5590ceb961ecae9d2b83f83a03f8dcc3201cd1a38492ad1d34398a25c1596702b57d2a9a1f1e8394fb1a56310fed"},
    {"gguf/rand256-F32.gguf", false,
     "a4dc5c25dc244780cc51e3aeccd275869f59f220c18bd2e3e78ec25852218da5",
     "f74facb5161d028835aeb81b05cee11997fba3d223284189ce62f403345676e8a903a9fe3589ce57eaf3be9971d63ddefb3b6ca144e282b7715d9ba4af63d196cfb104a9040f7da35c7fcd32326cd9007072f1e8a70a05fa75b0764f4e6a7e6fb69729d4a553a5af7f06ed9d820b41b530be6b0fce6f2dcd80feb82a8725be95ee3671e930dfcae83ee67f7309d2688ef80d0b6e104ae115e9364b3d41f41f71"},
    {"gguf/rand256-F16.gguf", false,
     "aa3f66db8f441196d117f10067470a2dbc9c5df9a5e69c941685529afd4c78f9",
     "089dc2ab54d9a9111abdb1877bc30aaf03c3ba249288751e8a533faf2a2d91addc6ce5ceac2597d8fa5c67903ecaf62b175841027d3b5b8fa6a35f8ecbf3e93468a0cd23f53e339e98ee8996a30c457f1478c94962fca0f57f711537310ab2e4e37d8be4cad421b083a742e8abb813bd302508718e48e23c48c41551c4a6ba5f8d1e78039d7d7d4df0bfc73b1911bc9dd25ad0ddc4affa5e2416f66baf35a9f8"},
    {"gguf/rand256-BF16.gguf", false,
     "5662b99df6a65d5c5df4e70829a68f020032bfda96e41278a43fbd4953f7ec43",
     "bdca86220805224508062c14c60e82588fa47e27942a66530c3f168588286fb2e79e88d243abb538882a3a1f65beb0e6ad0ed8c88670d161e63907f714977af1e5fd1abbe33a16f175f454b859992b1a13c08c478ba3627840f2a9aa1291cea9313349d25ff795bd3119b467ce11b3e930608ecdbdb4e16220211e59b2ba778d97e9e1decfa3039a003a41f1e775da4da08d7d2807aa7a4e9066ab7fa6f0b06c"},
    {"gguf/rand256-Q8_0.gguf", false,
     "c8abad8dcd5c3ecbc738b550041df6ac3553a32ed043cbd68efad18d6144d408",
     "15cca17045e89e4dd31098b5d44f453c6877bb21dc00bf5f57ca1da03ea449495b0f1bbe335f66ad35aecf62f8439bf824574ce2fc77636f175a1e6ac8e4d24a00453f64967b53861c651c3b642952d5b243272dec12cc934fe7059215284dfd3a89f1d7adb4c7797424c2bf1f6b442c0d5fa62c955a928551f1a3cddd0ec96eb7ffbca7406125f628d98cfd288307ba1d6f119a09115940ba9e961170d49ded"},
    {"gguf/rand256-Q4_0.gguf", false,
     "f2012274ac5b273bb1618b991bcf6ae985ad65af0d455c5978d11e6866145a3e",
     "7e273c52bc355c94f1b3418abd477ce98ef0737d0a0a0319726294941d29e1576c2754b443eaf0c064531a26c36428651fa007f6e279097e2fc8ec07a6f615669f05b0a08d5f2fd6fd12bf707ea065259c7cef640a2dbe88bf5bb2ad5d0d10d1a0246cbeb6b4ef76cf66dc0ac918034889db6ed98988ec26c6094754016fa02a11554831d9e10e99b1ce203076af640bfca7e89ce8d4db966dcc7ea8c1378a09"},
    {"gguf/rand256-Q4_1.gguf", false,
     "be94e23bbda60c20954ee917976a129adc1115b05a2d6849d875eb3cbc96e7ae",
     "4ce8dd5dd6bea0662cb635b8e0ea5bbb7f2050733e6f9af9fcb3ca0824541086892df3ee8623573fcb585a8ea9302a042a6667448b2f95ab0bb19709c2d34365435d92263d2f0f27c726489b32ae019f1d269c8d4929f46d96cbc506da88f89d77e8695208d407d11ccecbf4c3600fdb6f54d70b839e38da2d53000bd2aa8f353c2b95154c116f765816c47fa694b6ef7660345c5d8674fd1c5ad50cbc5fa039"},
    {"gguf/rand256-Q5_0.gguf", false,
     "4b17a0eb98c2a2bddd0854fad59579c873586c926b201ac6eccce48093e8f1cf",
     "cff164b870a805a0c2734926ae415f5adc30c3adcbd4b0201e5c32246ab2681afda436e1024149cd84ebaac900553263c8e7580954c18178d6a479c85979dfdad7bfb364217cda68d4645ce9282fa6e8899a521a735babf36f72d8f6573aff2bc01ad302cf51a22d4cd27a7cc8cf81ef7fd48399110b0ac3263b9dad52c1f5e7596ec88ac17aec0feb497d1a9965406c38fae276acf7df655ffc194caaa32249"},
    {"gguf/rand256-Q5_1.gguf", false,
     "b47389e50b0404c37991c7f34b68dc1137bf74bc17d2b3157e05c0908917556b",
     "9d147599b27f28919183ebfe462e6bd433d14fabea0f72eacf7a87be74d64f43b1efb9901817d1c949bb9d1bba84f6fa01f07c504cbe5ce30ed1e0fb991e3d9d0efb722f0978baf2864796a113a0a0d994df73e667189ff843394f8d285eb6aced9de1a238fa3e1c8086394689777a0c08dcd8a9bf4360987bad189c183dfb417c20d9607f0e8d37f94e18437d5b7e1814578cd50cd2e579ebcfbf721af3a0ba"},
    {"gguf/rand256-Q2_K.gguf", false,
     "f7167323a4cd7f5f3497454ce29af1251e729ad3f4f9240b1c2e5c60989115c8",
     "3f15103e576c73662ffe288b64c310dc7fa79dd7c51d9da5c7715b9024a4db794abd756a1c7c1770c301088e194de743664bc991628f1ef256a6aa8d8e3ccd3358e20c26c94400524678989d5d72381857e4ef725617ecd5d2db9a6ad375ee249b781981ddba635bdc5a4a0362871f08a893b854ebf75d232c923ba871061770edbaa8ad8a3889da0c0679a8cf5d649bcb076df04441361788f7a70ae4bb5f40"},
    {"gguf/rand256-Q3_K_M.gguf", false,
     "bd456e5aa4676fa02e831d4dff2e77653146e2d704ffc4854d6590952989b5e5",
     "3d885b1a81d9944a42a2e67ec625ef7bf3deb5f29cb4aa8ddd067d40333ac98c2ea61b03e30cfafd241a1003b9a08427f8654a151f38d2d8ab36124fa3c8d58d852b74fd4aace9d7efdea3b15fed35e0348f65ffd074306c1f7ee9437573080502e2202da59a538b618b30c043aca49b772e5f19fdb48adf2dfcad64be221647757b1807f88c392b88d534beff1dc6b1cfa5a4007f36a36cfdc93f06bbf18b68"},
    {"gguf/rand256-Q4_K_M.gguf", false,
     "512b05e8c98fbbf088a672e6d23b9dc918849b2ab8d2c1f7854d2132473e3a7b",
     "06650ddb665cbbe407a81f8ed17cd8fbf4485e4f249e234f6ce2c47f6dd79269537db081e228e5f07968581c42a61664c938ce2827ff2387d7a1db24f7191c4ea31640d1fc7576d96dc90ea9585d8d7c82ac853b54461b5c614352fabbb29ed2f3ee06437bc325c439be4a33a95d7add83b47d41d67558ee42ee7a2ba1472f72c8a43580793c54215d5c1d4e249fb1fc155e9c96177aab1c358b06c7ae16c83c"},
    {"gguf/rand256-Q5_K_M.gguf", false,
     "018773b0efa133e79c95bb070f8f44e637f2b6d20df561112fbcfccb30a19510",
     "f7c693dae756532d46ae3d78c5a2e88aebf2623f7b577cf3b16f3853a41335210d182cfd574903d3adf7e9aec8007db6101cd71d7169cbaae15cb89b82819f2c92fbe8d1cc26db54a6f530bdee297f901405418e592f91723fa12c0c4a8380fd3a3963dc6330e957f6f764cfe64eb1395ce9b0b2f5a5642528422c8ecb27e6e80b4437a36436fde8574947f6af48b34a91f0698ce2a3eca910dfa4983aaf01ba"},
    {"gguf/rand256-Q6_K.gguf", false,
     "786c2a55ffa5f7ca6517ad1d7c06710ff6a8ad53c5edaacc444e55c06d3c5788",
     "11050525cd52951c679c4953c29f12f153f44846dd976de41902ce1e87cf8a8ca0530525189cbda34d17c9153c157e693d520c50209ccf4c71606fd729ea97f3b43a87c56085d4296de503fe06bd09d5c857ada0f68f39d6363ffeb3534fd8c63e1226e291b4d9d11eea18956378ea0b6f4557f640277c02309164947d20b1b40fb36e44d4f35d8654764dd51e2e18627840f475ef88fc5f0b3c33219136ae83"},
    {"gguf/qwen2arch-F32.gguf", false,
     "3efc211cb866812ec0b6659617a90a237eef312e38ffc6eecb7944cd9d422c47",
     "0c538eac746e796a56fab4c5fc9e9d5de6a1543929cad35895fc0a1ce059889b0901842255b8beebe0d99cc2334e57d97ee1bd24b1d3f23d5263dd7bff0e238cc6fc5e38ecd06cb177e70cfc458d6482bf9d334b31b305e36bf39c26818c3955a0fc800bfe145769188d1813281ebcc74980ba504bc6b40638c7473ce56923e27fc65cb93fa87a4128d6fddc259a114700001ae3eac7720caac7194a0b9cf3c4"},
    {"gguf/stories260K-Q4_K_M.gguf", false,
     "756c99e42c0dc5bf488424a19d1487c2e7542b9fe6b6ada58232151032e69a2b",
     "6ea6901131f911b600d5c764ea4bf78b6449d9d2fe78c2d298c8eb5c897909817523198a1b14d19e02aba8426f8e3c340d4e5acb93f2695a0fe3fe6f8835733cbd2f01fd959f34fdd64e476653d8c5dcb4746e68e615526a95856e11782f61bee12a7731d48302adeb14f17bb6a106af102084c59c1d7a20182bb32cc4294412dbe16997881b1b924838b328814d3c77ecff7eebda80b71b19b3e82f4fcaf35a"},
    {"gguf/rand256-F16.gguf", true,
     "ce339e0dc4da9a248d7d8288db6bf15091765f439dc4cee3005ead56875d60dc",
     "e6160483038c3f437f6717b40edf56291fadc1b64f656e0dddfb3b697ae9f68f0820d0b019ad9caffe5a05895f9983b1d36ba7f0354371ff2545a7fb6331f7c2f4b2778b9babe57281992db22365ffc1de83fb03fb143957231631e8804a1abd9b8f0d93d3263060abb09eaafeebcc4d625bf5ef86c2dd423efffde2b381983d0a2cf8c36073c5c89ab669ab900ae5c3165ed379367d226688d740ff5cb09af8"},
    {"gguf/rand256-BF16.gguf", true,
     "bfd7dfff879cf999f53b8ef1cf9ba5db6f06a81cad95001326df54a785f0f53a",
     "6593ec70437c18914f7cd0d02cd9becc41f435c0e0d18feb1f2a721f214b07cb52fedf74a6551b2e1b2e09bc5eb8b7b499b8756021ed415212b167268ce1fa03123c29f6f498a730e4f8ce42b9e7d08ecc5a0098f8af3a3ea47934db4d1cc694e86cd6d4e876a4c17ff3eb8686d8efacbdba7f624904ef631db5265e67168409c3ba1d6f7104e4b8567ced07846a0dcdf8fb0002e6d55cd47938d02b613ac751"},
    {"gguf/rand256-Q4_0.gguf", true,
     "94ea58b344fec8a1061ea33fdab0158940391524783f9acf09f953c2d648036d",
     "0438302154d3054d56d308248498401a89fef902dfe093cae8e139a37e37cc9b4e908f0ec6f5e584d3009e583abe54ea0bfc7fbe5bbaec8f99a6baec71fa2030da664554d2488ed6c4960c40e98293e44171ac7f86bfb8dd2e969871cec9ca83d941420d907fdf4bfaeb361deaa44c866359d766f563393adabe6c34dc6e1a335ed258cd253cde2d8a200a95bb338e4b986538c078a1365378398816fcd474a9"},
    {"gguf/rand256-Q4_1.gguf", true,
     "eddadd861ec4c94ed0d63bae4ec2e47e21cb7e32ab06771cb770a50c31c6f647",
     "2e7548acb810129e95fc2827ab3f8d56260c8a06b38215776d3ca80c8eb4bf794b4270bf2f4ac6485bec9289f1d22b3222a097aacf90252f0edd123652da61f3fe4754aab2d0c99885ba9ef8617aed18cb1e085496b071f5a422aac6ddd381757229cf81f49f6dbcb3cb9db0c056c2f32ce0c6d09ad309bcda52471febbfbda26c3b2a7c7b8bd7901b973dc9c41a1816b32fc4948041731fb88f8504b96e5d73"},
    {"gguf/rand256-Q5_0.gguf", true,
     "7c9b6c64b553acd04c048e12fead907f2de8abfc98437fcc2aae47fe9a9062de",
     "6f9c8780518e127b0fe8b5451cff450bef74884bc45eb9c1c06dd81ea254bd4770a0d9b1a2933b2a8cc83fd78fb48d84b210b7473708331ee3baaea6053f1b425c21480305d2ca4177d9e77acd87e901f4cad5ea3785a99c97b525d8e6c9c7f2fce474b67515d6a2777c40b31514cb6ddf16f97031deef734a0dedeb50fd021d1010c28f7ae4d10ccc2c0736fa3dd7d38a3053c7ea57f3c9855a3c9a49dce4ce"},
    {"gguf/rand256-Q5_1.gguf", true,
     "575f99d0b2ea1c77df0c564d31fe82699069a0d868d5428f451e0246a4e6196a",
     "325412a3a0cd2ec3f9819d79d14e2c3eb00e0e8edfb9b6112852325b53f0325394166c4c0028ebdd53b0019bbdd338a364905046abde2af92dd96b328bc6b2cc76948c400275351c37d23299ec57faf50e985e6105efabd736e117352eab912d9a92d227220b107481bad4d0cb7d5a100dd70ce252c1c507c926ac7eb6b41c8e5b385cb92c678a48cb26d50fb84c9184d976aa7182c3b6efb987d49bcabf6118"},
    {"gguf/rand256-Q2_K.gguf", true,
     "c82d619f87d7447d7f6e0aa84a29eb5de4e06c0bc42c03d73d365d88bcf3d1e9",
     "9bef9c9259c1700d4bddf0884c845b94d0dd817e272247941637062a45952fb805ac17f5e9c7ff90cd1d4c0806dfb1773b421a6ba9c5621bc679834e9ba494f1a9b28f334fda18eaff1772c9c3f0eac7d96723e722f374db9dbf4bc22d70b5e439737a9c25131f44efbb0965a55626515d0dabb99054c94966f859be40d0f4230e749b1f96c1ea1679afaf7fbac72c2d81f18a629d5872ffbdfb67d910eb8d26"},
    {"gguf/rand256-Q3_K_M.gguf", true,
     "450e596408720fc99eadadb0da928a44aacda7867176d5269188cb3c2c0477ab",
     "bf0968ce759b7a6bdcb4d90e03bbe1b63c3627cd98075ceebefc29f504b9671264e5c124678a382d0e8589e824e6167ed5b78f40bc1c337657f7bbdd731273be301001c070c8ed985bdd38c6aab126033b5943f71c7802104774791676e0466eb4a9fc6cb169204daf7ac68c956f8dbbbe1698c601421cd17c375604f7b2860a2d9dad6a92de1d03fe991106b3029f4e02d472bf241c7a889aa981585a945f6a"},
    {"gguf/rand256-Q4_K_M.gguf", true,
     "992cb06bc660306f68c434a1ea9eac9ea9396fa1fe3d43a89d330019b49d35ec",
     "1ce5f30ba95904a44ed6078a3ba6e06d1ae0361c2a10207c243cb2b569a4b53632b1d634a234bd3fc32350adf15651c85eafdab927ff27bd9c6bf00211b3be94ea44aab551212445f8a1677fa6790e0bab82021c61f0064828795577bd80d5691aabd5fa93d55e18ba1ee4324c70286a71ee7ca659ceb88ffc42b42c80be293e7464ad5717cfbadf251155c48f6e11222b74ce892c45c6d403c5be097e489486"},
    {"gguf/rand256-Q5_K_M.gguf", true,
     "04c9bd70179ce0f58b640f9df608dccfc15b82fd748562065d185265a88d1772",
     "519ea348c1cc4f10d22ea74b0ac59776881b2c51a8347cf438c5df4f21c3b88d564d6d70feedfb62f1d053c2d718e80d36be783da0bc0e4a026e6d900e7a28d099223bf2dfa58b210d7b76650bf4754443c99bbec015e985a11db2abc72b06f61ffe54a5f6ff472a98404379d0c0960680d5c4d83a2d6918b9bb13e7326cdc1bf51ef9b61957f64b762d98890430ddfd1065aa98a0fc81a45c6ea52072c90e1d"},
    {"gguf/rand256-Q6_K.gguf", true,
     "297a8e3664a05f149e68473f762c5a5942b35d656b8372d55b3fd3d312c8cf2f",
     "77285339aef629d5f4e254ebcde90d81616adc2bd21c3ddda30a13635f56ffca2bc0ec9b70066bc0652342bbe2d8c652708467e57f1d433f0b1cdcb7335720aed5412cb2bc7a21c4e1b44faee2dc8d4b36dbebd939200eb425a4e8dbc63818304a1348cc40f38decf09a90c270834c3715bc5c44a1a47d9f1b5672a24bfaf3a1fae36239a32fbb922618c249fab84b668ce310da7109155f94203eb069fa0cf3"},
    {"gguf/rand256-Q8_0.gguf", true,
     "a04df75e283522d67f06eb9f2223f36b9901ecd464ada37e9ffa8189770e1c85",
     "f975ed8297e2f1b5eb3d9e87fdb1a9a3756acac4d3e72a052219a4d7e58f3e670b26378b4fc3cbcccb83e9630eccaf344939829585835173bacf0c38766a6a06e184a584ff139e6da347df8fec61a5834be7fd4cf2e498128ed18ce0908affe7396a085e55a0e93eb9d66e35c00e6d71742e99151ac405451faba5dcb6b8c10c66e9fad55fb008b658cd11fa0bb4f90afaf7992d49008c4733bc89c83145daee"},
    {"data/qwen3moe-tiny-F32.gguf", false,
     "a54ef5c16149d68932bd3d7f32bd801466bfaa4a35853de65adbedc05ccd5c8f",
     "6c30ddcd74ce55c5022ce15f92dabc51b5af32900ebd575fbda5174dbfff2d4f7041b5b44392bb792c932b7757f553c3619e2e4b9b7b3dede0d2a3f0023a8fce95bd3dc71139897640ce26bfb2f050fe9f8fe0e6ab31813d1459c24f9c4511706c503bba2dc3118e57e8646f4cd9e5b826c4d1eb62f076925c73c1829b89e6a6bbd6035b3df569a8378025844d04f5eff86e2b2f26bb6901633c1ac382c324fe"},
    {"data/gpt-oss-tiny-F32.gguf", false,
     "6750f02589f61e6b3cf873874fcd3c73b4fe91b3b25ae98e21c9e0690360aae9",
     "747b34eb7aea1e29f8ff5c0d90712f555da0f1919297ea9d52832d8c601076a6a96578a98bb69bbc16f7a349cd8dccc983a01f3796c75900fa6c00a27a270339e0b919c7c11c9e250dba6bbfd83caa14abf88d5a50f637f81d6885c2f97bf334d2f47dcaa644e74d055e94f2097ec11165e827f682217fa20a650142ae9e283b9fa84d6d1bba16595c8e27665abf3351b6e871c5bcb01a5bf9d89cc11658cd60"},
    {"data/ik/rand256-IQ4_NL.gguf", false,
     "283366ab6f54604886fd9c7cee5fc95f7ab84b2b05ca26661f17fc751583747a",
     "a4d74bab059c105da559ee23e3210b0c5c8b9e24cfe72af2a95ac03f4e3bf5859d5ab4b762e75c6d821e17f84acf3fa8d68e25e4fcc64b04ee1168ae9688a456f159516b27e792944ba8d93237ba8940387c6b55695098f690e16103a0b0a5622e60ba30eff0572fbab493a5f4a5ca4716dcd493a4b3777a3e78c46546650a123fd8fdc071443b5904fbf7a80eccf9ed737f40ccf6dae5a0969473fd8dba7151"},
    {"data/ik/rand256-IQ4_NL.gguf", true,
     "2b52ffe63afe0b0759645d45f87561f89cb241a6250bd65977d26f7b3d8cfcdf",
     "a31372bb90679b03b57336a3bd0ef4fa59a82121e583a89e903c5dd31842b590bc4961b129822d5ca7df36358a395e21a3a08c526e0d093b831995a89f0efaa2a3e5d3dbcaf8dc95c1c7e67d52f048593110abe99507139279f59aea0c8a5d732506b14f5cce524e25ba803ef8357a5794d54ed52bba459583375f2bbbeb9a17c32cdebe5d3539e0dfc46870efcc7ff66185721858e870f8952171ec143fec5a"},
    {"data/ik/rand256-IQ4_XS.gguf", false,
     "cbe00e3adb401b6ee0780d7ebf93176daa553b03c57dbe60e105a9acc01712d7",
     "e4074e789904d7854a015402b0002b5a011403a4cfe00b922b13531e54f6960810a1f2b3899703870f66db22738ed5c600f5a95fd38b07c9c8cd96f70583fee7a56cd89552c598a6a408c7338f47d94c6cf5afe89293d3fb2af109fc6d774d58848b8abc0ae6da2e7b45ab13c58080d26b493e9278524e6ea909110cfdba7640e8e228d6806bd2993b8eb692f3e79466d3ce7a6bd059129e4d7d09bb9c87b9a6"},
    {"data/ik/rand256-IQ4_XS.gguf", true,
     "01070c19da19126e0a10414a4f1999f66a6d871aa857e5819d6ba7b4e573888b",
     "e739adcb3521d94b0b7a2951290cdacae33871577085b0522ffc9711a9ed5e67fa64b85840401167e8d4673653178d6b6307be6c795abf0cb48028ff988edf5e3eb6cfc1def67fe074dc0e418314aa2643a4b97c5679112ac2d998bfec5b9824d743696f4a7092d04750983499fea8a0c70647f93b8cc7f1ddac678fa23f1b0eaf7ed6a56ec0a78bd04ef335c1c2e8b29c936ec39cb139a657ea648413e8b999"},
    {"data/ik/rand256-MXFP4.gguf", false,
     "a4b29aeaec86f1c10dc3ad55107697d0825b1b112da7a4b80b6028ee1e4543ee",
     "d1a8cf9384edfa643cc67e5e1e56e727db0dd27dd8936c4a850adfc4ad4f77a905f60d508e43899a0301a9e83728f827e741e892effb7b3b24a7823ec225c7032f976151a00145a5e99803d57a27e706594ef44d25872e974c5277643655d6ba725a3e7bacdc0aff43d556897412deb2bf744fad2cddb492dc5993fc013bf559ce4eb49f994ba3147baa558e29521bb80b267ba20d89f62e3a49e1849f804e8f"},
    {"data/ik/rand256-MXFP4.gguf", true,
     "36a0854fa50589579ccffaba534b4f41bd98eeac1db4b02f52e82a452d79eb69",
     "6fd44bd7654d300140e386c1a4d81c472d2a89df5b0092123cbc0850d9dcc2352528e8eec88acf311eb0b663fa3f08f34b222fd6853d0ca67de6eaf39071d415faf2b0d4699203d4b3d81d175e8108fd301735a847054b0a8832c2da7917fbc5770c263c6c6bc98bee71d9dd6908b11a819d06e535a8a80671c0909d3d8753e8ad20e124145ed2d5a398d716f9b85962db96d11e7170d1b22dc8e08cf252a90e"},
};

std::vector<int> prompt_ids(int vocab) {
  std::ifstream in(kvd_test::shared_dir() + "/reference/gguf/prompt.ids");
  std::vector<int> ids;
  std::string item;
  while (std::getline(in, item, ',') && static_cast<int>(ids.size()) < kPrompt) ids.push_back(std::stoi(item) % vocab);
  return ids;
}

kvd::ModelWeights<float> load(const std::string& path) {
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") return kvd::load_gguf_model<float>(path);
  return kvd::load_checkpoint<float>(path);
}

/// Every position's logits (kPrompt x V, float32, row after row): a prefill of the
/// first kPrefill ids, then one decode step per id.
std::vector<float> run(kvd::Transformer<float>& model, const std::vector<int>& ids) {
  const int V = model.config().vocab_size;
  kvd::KVCache<float> cache(model.config(), static_cast<int>(ids.size()));
  std::vector<float> out;
  out.reserve(ids.size() * V);
  const std::vector<int> head(ids.begin(), ids.begin() + kPrefill);
  const auto pre = model.prefill(head, cache, true);
  for (long t = 0; t < pre.rows(); ++t)
    for (int v = 0; v < V; ++v) out.push_back(pre(t, v));
  for (std::size_t i = kPrefill; i < ids.size(); ++i) {
    const auto row = model.decode_step(ids[i], cache);
    for (int v = 0; v < V; ++v) out.push_back(row(0, v));
  }
  return out;
}

std::string hash_positions(const std::vector<float>& logits, int V, std::string* all) {
  *all = kvd_test::sha256_hex(logits.data(), logits.size() * sizeof(float));
  std::string positions;
  for (std::size_t t = 0; t * V < logits.size(); ++t)
    positions += kvd_test::sha256_hex(logits.data() + t * V, V * sizeof(float)).substr(0, 8);
  return positions;
}

/// The golden row of the same file in the other mode (the default row of a fast one).
const Golden* default_row(const Golden& g) {
  for (const Golden& d : kGolden)
    if (!d.fast && std::string(d.file) == g.file) return &d;
  return nullptr;
}

/// What a build must give for g: g itself, except for 16-bit weights in the fast mode
/// on a CPU without AVX512-BF16, where the fast mode keeps the default numerics.
const Golden& expected(const Golden& g) {
  const std::string f = g.file;
  const bool sixteen_bit = f.find("-F16.") != std::string::npos || f.find("-BF16.") != std::string::npos;
  if (g.fast && sixteen_bit && !kvd::build_info().fast_bf16) return *default_row(g);
  return g;
}

class SameBits : public ::testing::TestWithParam<Golden> {};

TEST_P(SameBits, GoldenLogitsOnEveryCpu) {
  const Golden& g = GetParam();
  if (kvd_test::shared_dir().empty()) GTEST_SKIP() << "../shared not found beside the checkout: no golden models";
  const std::string file = g.file;
  const bool in_repo = file.rfind("data/", 0) == 0;
  const std::string path =
      in_repo ? std::string(KVDECODE_TEST_DATA_DIR) + file.substr(4) : kvd_test::shared_dir() + "/models/" + file;
  if (in_repo) {
    ASSERT_TRUE(fs::exists(path)) << "test data missing: " << path;
  }
  if (!fs::exists(path)) GTEST_SKIP() << "shared model not found: " << path;
  kvd::Transformer<float> model(load(path));
  model.set_fast_matmul(g.fast);
  const int V = model.config().vocab_size;
  const std::vector<int> ids = prompt_ids(V);
  ASSERT_EQ(static_cast<int>(ids.size()), kPrompt);
  const Golden& want = expected(g);
  const bool print = std::getenv("KVDECODE_PRINT_GOLDEN") != nullptr;
  const int saved = kvd::num_threads();
  for (int threads : {1, 2}) {
    kvd::set_num_threads(threads);
    std::string all;
    const std::string positions = hash_positions(run(model, ids), V, &all);
    if (print && threads == 1)
      std::printf("    {\"%s\", %s,\n     \"%s\",\n     \"%s\"},\n", g.file, g.fast ? "true" : "false", all.c_str(),
                  positions.c_str());
    if (all == want.all) continue;
    const std::string golden_positions = want.positions;
    std::size_t t = 0;
    while (t < kPrompt && golden_positions.size() >= 8 * (t + 1) && positions.substr(8 * t, 8) == golden_positions.substr(8 * t, 8)) ++t;
    ADD_FAILURE() << g.file << (g.fast ? " (fast mode)" : "") << " with " << threads << " thread(s), "
                  << kvd::build_info().summary() << ": the logits differ from the golden bits"
                  << (&want != &g ? " (the default mode's: no bf16 fast mode here)" : "") << ", first at position " << t
                  << " of " << kPrompt << (t < kPrefill ? " (prefill)" : " (decode step)") << "; sha256 " << all;
  }
  kvd::set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(SharedModels, SameBits, ::testing::ValuesIn(kGolden),
                         [](const ::testing::TestParamInfo<Golden>& info) {
                           std::string name = std::string(info.param.file) + (info.param.fast ? "_fast" : "");
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
